"""A throwaway PostgreSQL cluster for the tests, started once per session.

The server binaries come from ``pg_config --bindir`` (Debian keeps them off PATH).
Everything lives in one short temporary folder: the data directory, the Unix socket
(no TCP port is opened) and the server log.  The server refuses to run as root, so
when the tests run as root it runs as the ``postgres`` system user through
``runuser``; otherwise it runs as the current user.

A guard process, started before ``initdb``, holds the read end of a pipe whose
write end only this test process has: when the process ends in any way (normal
exit, a failure, Ctrl-C, SIGKILL) the guard reads end-of-file, stops the server and
removes the folder.  The normal path stops it directly first; the guard then finds
nothing left to do.

Run as a script (``python pg_server.py guard ...``) this file is that guard.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPERUSER = "postgres"
WRITER = "writer"
READER = "reader"
LOCKED = "locked"
"""A role that must give a password (scram): the only one the socket does not trust."""
LOCKED_PASSWORD = "s3cret-Pa55"
DATABASE = "memstore_test"
SOCKET_NAME = ".s.PGSQL.5432"
SOCKET_PATH_MAX = 100
"""sun_path holds 107 bytes on Linux; stay below it with the socket's own name included."""
START_SECONDS = 60
STOP_SECONDS = 20

SERVER_SETTINGS = {
    "listen_addresses": "",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "60",
    "shared_buffers": "64MB",
    "log_min_messages": "warning",
}
"""Throwaway data: durability settings off, so initdb and the tests do not wait on disk."""

HBA = f"""\
local all {LOCKED} scram-sha-256
local all all trust
"""


class ClusterUnavailable(Exception):
    """No server could be started here; the message says why, in one line."""


@dataclass(frozen=True)
class PgUrls:
    """URLs of one database, one per role, as a user would write them (no driver named)."""

    database: str
    writer: str
    reader: str
    admin: str


BINDIR_ENV = "MEMSTORE_TEST_PG_BINDIR"
"""Names the binaries' folder outright (another install, or a missing one to see the skip)."""


def find_bindir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: ``$MEMSTORE_TEST_PG_BINDIR``, ``pg_config --bindir``, Debian's."""
    given = os.environ.get(BINDIR_ENV)
    if given:
        folder = Path(given)
        return folder if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file() else None
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(Path(out.stdout.strip()))
    # Debian's /usr/bin/pg_config answers /usr/bin when only libpq-dev is installed.
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    candidates.extend(versions)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


def _version_key(path: Path) -> tuple[int, str]:
    name = path.parent.name
    return (int(name), name) if name.isdigit() else (0, name)


def _server_user() -> str | None:
    """The system user the server runs as: ``postgres`` under root, else None (the current user)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise ClusterUnavailable(f"running as root and no '{SUPERUSER}' system user to run the server") from None
    if shutil.which("runuser") is None:
        raise ClusterUnavailable("running as root and runuser is missing (the server refuses root)")
    return SUPERUSER


def _as_owner(owner: str | None, argv: Sequence[str]) -> list[str]:
    return ["runuser", "-u", owner, "--", *argv] if owner else list(argv)


def _make_root() -> Path:
    """A short, private folder: the socket path must fit in sun_path."""
    for parent in (tempfile.gettempdir(), "/tmp"):
        if len(parent) + len("/memstore-pg-XXXXXXXX/") + len(SOCKET_NAME) <= SOCKET_PATH_MAX:
            return Path(tempfile.mkdtemp(prefix="memstore-pg-", dir=parent))
    raise ClusterUnavailable("no temporary folder with a path short enough for a Unix socket")


@dataclass
class Cluster:
    """A running server: its folder (data, socket, log), binaries and owner."""

    root: Path
    bindir: Path
    owner: str | None
    guard: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def socket_dir(self) -> str:
        return str(self.root)

    def url(self, role: str, database: str) -> str:
        return f"postgresql://{role}@/{database}?host={self.socket_dir}"

    def urls(self, database: str = DATABASE) -> PgUrls:
        return PgUrls(
            database=database,
            writer=self.url(WRITER, database),
            reader=self.url(READER, database),
            admin=self.url(SUPERUSER, database),
        )

    def run(self, tool: str, *args: str, timeout: float = START_SECONDS) -> subprocess.CompletedProcess[str]:
        """One server binary, as the server's owner; its output captured."""
        argv = _as_owner(self.owner, [str(self.bindir / tool), *args])
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def log_tail(self, lines: int = 5) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])
        return ""

    def is_running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def stop(self) -> None:
        """Stop the server (fast, then immediate, then SIGKILL) and remove the folder; never raises."""
        stop_and_remove(self.root, self.bindir, self.owner)
        if self.guard is not None:
            with contextlib.suppress(OSError):
                if self.guard.stdin is not None:
                    self.guard.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.guard.wait(timeout=STOP_SECONDS)


def stop_and_remove(root: Path, bindir: Path, owner: str | None) -> None:
    """Shared by the fixture's teardown and the guard: idempotent, best effort, silent."""
    data = root / "data"
    pidfile = data / "postmaster.pid"
    for mode in ("fast", "immediate"):
        if not pidfile.exists():
            break
        argv = _as_owner(owner, [str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", mode, "-w", "-t", "10"])
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, capture_output=True, timeout=STOP_SECONDS, stdin=subprocess.DEVNULL)
    if pidfile.exists():
        with contextlib.suppress(OSError, ValueError, IndexError):
            os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
            time.sleep(0.2)
    shutil.rmtree(root, ignore_errors=True)


def _start_guard(root: Path, bindir: Path, owner: str | None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, str(Path(__file__).resolve()), "guard", str(root), str(bindir), owner or ""]
    # Its own session: a Ctrl-C sent to the test's process group must not kill the cleaner.
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def start_cluster(*, settings: Mapping[str, str] | None = None) -> Cluster:
    """initdb, start, provision; :class:`ClusterUnavailable` (server stopped, folder gone) on failure.

    ``settings`` override :data:`SERVER_SETTINGS` (a benchmark turns durability back on).
    """
    bindir = find_bindir()
    if bindir is None:
        where = os.environ.get(BINDIR_ENV) or "pg_config --bindir, /usr/lib/postgresql/*/bin"
        raise ClusterUnavailable(f"PostgreSQL server binaries (initdb, pg_ctl) not found in {where}")
    owner = _server_user()
    try:
        import psycopg  # noqa: F401  (provisioning needs the driver; say so early)
    except ImportError:
        raise ClusterUnavailable("psycopg is not installed (pip install 'psycopg[binary]')") from None
    root = _make_root()
    cluster = Cluster(root=root, bindir=bindir, owner=owner)
    try:
        if owner is not None:
            shutil.chown(root, user=owner, group=pwd.getpwnam(owner).pw_gid)
        cluster.guard = _start_guard(root, bindir, owner)
        _init_and_start(cluster, {**SERVER_SETTINGS, **(settings or {})})
        provision(cluster)
    except BaseException as exc:
        tail = cluster.log_tail()
        cluster.stop()
        if isinstance(exc, ClusterUnavailable):
            raise
        if isinstance(exc, Exception):
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise ClusterUnavailable(f"{detail}{' (log: ' + tail + ')' if tail else ''}") from exc
        raise
    return cluster


def _init_and_start(cluster: Cluster, settings: Mapping[str, str]) -> None:
    # C collation (code point order, like Python's str comparison); a UTF-8 ctype so that
    # pg_trgm treats non-ASCII letters as word characters (under ctype C it drops them).
    init = cluster.run(
        "initdb", "-D", str(cluster.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8",
        "--lc-collate=C", "--lc-ctype=C.UTF-8", "--no-sync", "--no-instructions",
    )  # fmt: skip
    if init.returncode != 0:
        raise ClusterUnavailable(f"initdb failed: {_last_line(init.stderr or init.stdout)}")
    (cluster.data / "pg_hba.conf").write_text(HBA)
    options = ["-k", cluster.socket_dir]
    for name, value in settings.items():
        options += ["-c", f"{name}={value}"]
    start = cluster.run(
        "pg_ctl", "start", "-D", str(cluster.data), "-l", str(cluster.log), "-w", "-t", str(START_SECONDS),
        "-o", shlex.join(options),
    )  # fmt: skip
    if start.returncode != 0:
        raise ClusterUnavailable(f"pg_ctl start failed: {_last_line(start.stderr or start.stdout)}")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def connect(url: str, **kwargs: Any) -> Any:
    """A psycopg connection (autocommit) for fixtures and tests that talk to the server directly."""
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=10, **kwargs)


SERVER_SEES_A_CLOSED_CLIENT_S = 15.0
"""A backend whose client closed its socket notices at the end of its statement or at the next
client_connection_check_interval (2 s), not at the close; on a loaded CI machine, later still."""


def eventually(holds: Any, *, within_s: float = SERVER_SEES_A_CLOSED_CLIENT_S, every_s: float = 0.1) -> bool:
    """Whether ``holds()`` becomes true within ``within_s``: for server state that follows a client's act."""
    give_up = time.monotonic() + within_s
    while not holds():
        if time.monotonic() > give_up:
            return False
        time.sleep(every_s)
    return True


def provision(cluster: Cluster) -> None:
    """The session database and its roles: one that writes (owns it), one that only reads."""
    with connect(cluster.url(SUPERUSER, "postgres")) as conn:
        conn.execute(f"CREATE ROLE {WRITER} LOGIN")
        conn.execute(f"CREATE ROLE {READER} LOGIN")
        # Belt and braces only: a session may turn this off; the grants are what stop writes.
        conn.execute(f"ALTER ROLE {READER} SET default_transaction_read_only = on")
        conn.execute(f"CREATE ROLE {LOCKED} LOGIN PASSWORD '{LOCKED_PASSWORD}'")
        # Only databases created for the tests are open to the readers.
        conn.execute("REVOKE CONNECT, TEMPORARY ON DATABASE postgres FROM PUBLIC")
    create_database(cluster, DATABASE)


def database_grants(database: str, *, writer: str, reader: str) -> list[str]:
    """Run as a superuser inside ``database`` (owned by ``writer``): what makes ``reader`` read-only."""
    return [
        f"REVOKE ALL ON DATABASE {database} FROM PUBLIC",
        f"GRANT CONNECT ON DATABASE {database} TO {reader}",
        f"GRANT USAGE ON SCHEMA public TO {reader}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {writer} IN SCHEMA public GRANT SELECT ON TABLES TO {reader}",
    ]


def create_database(cluster: Cluster, name: str) -> PgUrls:
    """A new, empty database owned by the writer and readable by the reader."""
    with connect(cluster.url(SUPERUSER, "postgres")) as conn:
        conn.execute(f"CREATE DATABASE {name} OWNER {WRITER} TEMPLATE template1 STRATEGY file_copy")
    with connect(cluster.url(SUPERUSER, name)) as conn:
        for statement in database_grants(name, writer=WRITER, reader=READER):
            conn.execute(statement)
        conn.execute(f"GRANT CONNECT ON DATABASE {name} TO {LOCKED}")
    return cluster.urls(name)


def drop_database(cluster: Cluster, name: str) -> None:
    with connect(cluster.url(SUPERUSER, "postgres")) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def server_processes(cluster: Cluster) -> list[int]:
    """The postmaster's pid and its children's (backends, checkpointer, ...), read from /proc."""
    try:
        postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    found = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                # Field 4 of /proc/PID/stat, after the ")" that ends the command name.
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                    found.append(int(entry.name))
    return found


def _signal_all(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@contextlib.contextmanager
def frozen(cluster: Cluster) -> Iterator[None]:
    """The whole server stopped (SIGSTOP) for the block: open connections stay open, nothing answers."""
    pids = server_processes(cluster)
    if not pids:
        raise ClusterUnavailable("no running server to freeze")
    _signal_all(pids, signal.SIGSTOP)
    # A child forked while the list was read (an autovacuum worker): the postmaster is stopped now.
    late = [pid for pid in server_processes(cluster) if pid not in pids]
    _signal_all(late, signal.SIGSTOP)
    pids += late
    try:
        yield
    finally:
        _signal_all(pids, signal.SIGCONT)


def thaw(cluster: Cluster) -> None:
    """SIGCONT to every server process (a test that failed inside :func:`frozen` cannot leave it stopped)."""
    _signal_all(server_processes(cluster), signal.SIGCONT)


@contextlib.contextmanager
def running_cluster(*, settings: Mapping[str, str] | None = None) -> Iterator[Cluster]:
    """Start a cluster, yield it, always stop it (for scripts and benchmarks outside pytest)."""
    cluster = start_cluster(settings=settings)
    try:
        yield cluster
    finally:
        cluster.stop()


def _guard_main(root: str, bindir: str, owner: str) -> int:
    """Wait for end-of-file on stdin (the test process is gone), then clean up.

    SIGINT and SIGHUP are ignored (a Ctrl-C is the test run's to handle); SIGTERM
    cleans up at once, so whoever ends the guard ends the server with it.
    """
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)

    def on_term(signum: int, frame: object) -> None:
        stop_and_remove(Path(root), Path(bindir), owner or None)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    stop_and_remove(Path(root), Path(bindir), owner or None)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "guard":
        sys.exit(_guard_main(sys.argv[2], sys.argv[3], sys.argv[4]))
    sys.exit("usage: pg_server.py guard ROOT BINDIR OWNER")

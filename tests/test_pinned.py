from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from bounded import run_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstore.errors import ArgumentTypeError, MemstoreError
from memstore.pinned import PinnedFile, PinnedFileStorage, is_secret_path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / "README.md").write_text("readme\n")
    return root


def pinned_json(root: Path) -> Path:
    return root / ".teaagent" / "memory" / "pinned.json"


def test_add_list_and_file_format(repo: Path) -> None:
    store = PinnedFileStorage(repo)
    assert store.add("src/app.py") is True
    assert store.add("README.md") is True
    pins = store.list_all()
    assert [pin.file_path for pin in pins] == ["src/app.py", "README.md"]
    assert pins[0].last_modified == pytest.approx(os.stat(repo / "src" / "app.py").st_mtime)
    raw = pinned_json(repo).read_text()
    assert raw.endswith("]\n")
    assert raw == json.dumps([pin.to_dict() for pin in pins], indent=2) + "\n"
    assert (repo / ".teaagent" / "memory" / "pinned.lock").exists()


def test_file_path_stored_exactly_as_given(repo: Path) -> None:
    store = PinnedFileStorage(str(repo))
    assert store.add("./src//app.py") is True
    assert store.list_all()[0].file_path == "./src//app.py"
    assert store.is_pinned("src/app.py")
    assert store.is_pinned("./src//app.py")


def test_duplicate_refused_including_other_spelling(repo: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = PinnedFileStorage(repo)
    assert store.add("src/app.py")
    before = pinned_json(repo).read_bytes()
    with caplog.at_level(logging.WARNING, logger="memstore.pinned"):
        assert store.add("src/app.py") is False
        assert store.add("./src/app.py") is False
    assert "already pinned" in caplog.text
    assert pinned_json(repo).read_bytes() == before


def test_remove_is_pinned_update_clear(repo: Path) -> None:
    store = PinnedFileStorage(repo)
    assert store.remove("src/app.py") is False
    assert store.update_last_modified("src/app.py") is False
    assert not pinned_json(repo).exists()
    store.add("src/app.py")
    store.add("README.md")
    old = store.list_all()[0].last_modified
    os.utime(repo / "src" / "app.py", (0, 0))
    assert store.update_last_modified("src/app.py") is True
    assert store.list_all()[0].last_modified > old
    assert store.update_last_modified("nope.txt") is False
    assert store.remove("src/app.py") is True
    assert store.remove("src/app.py") is False
    assert not store.is_pinned("src/app.py")
    assert store.is_pinned("README.md")
    store.clear_all()
    assert store.list_all() == []
    assert json.loads(pinned_json(repo).read_text()) == []


SECRET_NAMES = [
    ".env",
    ".env.local",
    "config/.env.production",
    "id_rsa",
    "keys/id_rsa.pub",
    "id_ed25519",
    "cert.pem",
    "tls/server.KEY",
    "store.p12",
    "store.pfx",
    "vault.kdbx",
    "credentials.json",
    "credentials-prod.json",
    "gcp-service-account-key.json",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".ssh/config",
    "home/.ssh/known_hosts",
    ".gnupg/pubring.kbx",
    ".aws/credentials",
    ".git/config",
    ".git/hooks/pre-commit",
    "sub\\.ssh\\config",
    # issue 9 item 8: each of these was accepted
    ".envrc",
    ".env~",
    ".env-production",
    "prod.env",
    ".git-credentials",
    ".pgpass",
    ".docker/config.json",
    ".kube/config",
    "client_secret.json",
    "service_account.json",
    "deploy/server.ppk",
    "android/release.jks",
    "infra/terraform.tfstate",
    "infra/prod.tfvars",
    "server.key.bak",
    "secring.gpg",
    # ... and the classes behind them
    "infra/terraform.tfstate.backup",
    "infra/prod.auto.tfvars",
    "infra/terraform.tfvars.json",
    ".env.swp",
    ".id_rsa.swp",
    "#.env#",
    "id_rsa~",
    "server.key.1",
    "cert.pem.orig",
    ".ENV.LOCAL",
    "config/staging.env",
    ".env_local",
    "home/.kube/config.bak",
    "client_secret_1234.apps.googleusercontent.com.json",
    "my-gcp-service-account.json",
    "aws_credentials.csv",
    ".config/gcloud/application_default_credentials.json",
    ".cargo/credentials.toml",
    ".my.cnf",
    ".htpasswd",
    "secrets.yml",
    "vault.kdbx.bak",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_refused_even_when_present(
    repo: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = repo / name.replace("\\", "/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("secret\n")
    store = PinnedFileStorage(repo)
    with caplog.at_level(logging.WARNING, logger="memstore.pinned"):
        assert store.add(name) is False
    assert "secret" in caplog.text
    assert not pinned_json(repo).exists()
    assert is_secret_path(name) is not None


NEAR_MISSES = [
    "src/app.py", "README.md", "environment.py", "docs/keys.md", "monkey", "git/config", "src/env.ts",
    "env", "envelope.txt", "dotenv.py", "src/environment/settings.py", "docker/config.json", "kube/config",
    "docs/.docker.md", "server.keys", "keys.py", "credentials.py", "docs/credentials.md", "docs/secrets.md",
    "tfvars.md", "main.c.orig", "CHANGELOG.1", "notes~", "config.json", "service.py", ".github/workflows/ci.yml",
    "gpg.md", "src/secret_santa.py",
]


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_ordinary_names_are_not_secret(name: str) -> None:
    assert is_secret_path(name) is None


def test_env_as_a_later_dot_part_is_a_secret() -> None:
    # ``.env`` as any dot-separated part after the first: a name like my.env.py is refused too
    # (a false refusal costs a warning; a leaked dotenv file cannot be taken back).
    assert is_secret_path("my.env.py") == "env-file"
    assert is_secret_path("env.py") is None


def test_name_variants_are_bounded() -> None:
    assert is_secret_path("a" + "~" * 100_000) is None
    assert is_secret_path("x" + ".bak" * 10_000) is None  # more decorations than MAX_NAME_VARIANTS peels
    assert is_secret_path("server.key" + ".bak" * 3) == "key-file"


def test_secret_rule_names() -> None:
    assert is_secret_path(".env") == "env-file"
    assert is_secret_path("a/.git/config") == "git-dir"
    assert is_secret_path("x.pem") == "pem-file"


def test_secrets_checked_before_filesystem(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Spies that record any filesystem look-up of the secret paths and otherwise behave
    # normally (raising from os.stat itself would break pytest's own bookkeeping).
    touched: list[str] = []

    def spy(real: Any) -> Any:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if any(name in str(path) for name in (".env", "id_rsa")):
                touched.append(f"{real.__name__}({path})")
            return real(path, *args, **kwargs)

        return call

    for module, name in ((os.path, "realpath"), (os.path, "exists"), (os, "stat"), (os, "lstat"), (os, "open")):
        monkeypatch.setattr(module, name, spy(getattr(module, name)))
    store = PinnedFileStorage(repo)
    assert store.add(".env") is False
    assert store.add("deploy/id_rsa") is False
    assert touched == []


def _refusal_cases(repo: Path, outside: Path) -> list[str]:
    (repo / "docs").mkdir()
    (outside / "secret.txt").write_text("outside\n")
    (repo / "escape").symlink_to(outside / "secret.txt")
    (repo / "escape_dir").symlink_to(outside)
    (repo / "dangling").symlink_to(outside / "does-not-exist.txt")
    (repo / "innocent.txt").symlink_to(repo / ".env")
    (repo / ".env").write_text("TOKEN=1\n")
    return [
        str(repo / "README.md"),
        "/etc/passwd",
        "C:\\Windows\\win.ini",
        "c:relative.txt",
        "\\\\server\\share\\file.txt",
        "//server/share/file.txt",
        "src/app.py\x00.txt",
        "../outside.txt",
        "src/../../x",
        "src/../README.md",
        "escape",
        "escape_dir/secret.txt",
        "dangling",
        "innocent.txt",
        "missing.txt",
        "docs",
        "src",
        ".",
        "",
        "   ",
    ]


def test_every_refusal_returns_false_logs_and_writes_nothing(
    tmp_path: Path, repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = PinnedFileStorage(repo)
    for case in _refusal_cases(repo, outside):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="memstore.pinned"):
            assert store.add(case) is False, case
        assert [r.levelno for r in caplog.records] == [logging.WARNING], case
        assert not pinned_json(repo).exists(), case
    # and with an existing list, refusals leave it byte for byte unchanged
    assert store.add("README.md")
    before = pinned_json(repo).read_bytes()
    for case in _refusal_cases_again(repo):
        assert store.add(case) is False, case
    assert pinned_json(repo).read_bytes() == before


def _refusal_cases_again(repo: Path) -> list[str]:
    return ["/etc/passwd", "../x", "escape", "dangling", "innocent.txt", "missing.txt", "docs", ".env"]


@pytest.mark.parametrize("bad", [None, 3, b"src/app.py", Path("src/app.py")])
def test_non_str_path_is_type_error(repo: Path, bad: object) -> None:
    store = PinnedFileStorage(repo)
    for method in (store.add, store.remove, store.is_pinned, store.update_last_modified):
        with pytest.raises(ArgumentTypeError, match="file_path") as info:
            method(bad)  # type: ignore[arg-type]
        assert isinstance(info.value, TypeError)
        assert isinstance(info.value, MemstoreError)


@pytest.mark.parametrize(
    "content",
    [b"{not json", b"\xff\xfe\x00garbage", b'{"file_path": "a"}', b"42", b"", b"[" * 100000],
)
def test_corrupt_file_reads_as_empty_and_add_recovers(repo: Path, content: bytes) -> None:
    path = pinned_json(repo)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    store = PinnedFileStorage(repo)
    assert store.list_all() == []
    assert not store.is_pinned("README.md")
    assert store.add("README.md") is True
    assert [pin.file_path for pin in store.list_all()] == ["README.md"]


def test_bad_elements_skipped(repo: Path) -> None:
    path = pinned_json(repo)
    path.parent.mkdir(parents=True)
    good = {"file_path": "README.md", "pinned_at": 1.0, "last_modified": 2, "extra": "kept-ignored"}
    path.write_text(
        json.dumps(
            [
                good,
                "string",
                None,
                {"file_path": "x"},
                {"file_path": 5, "pinned_at": 1, "last_modified": 1},
                {"file_path": "y", "pinned_at": True, "last_modified": 1},
                {"file_path": "", "pinned_at": 1, "last_modified": 1},
            ]
        )
    )
    assert PinnedFileStorage(repo).list_all() == [PinnedFile("README.md", 1.0, 2.0)]


def test_concurrent_adds_from_threads_lose_nothing(repo: Path) -> None:
    names = [f"src/f{i}.txt" for i in range(24)]
    for name in names:
        (repo / name).write_text(name)
    store = PinnedFileStorage(repo)
    barrier = threading.Barrier(4)
    results: list[bool] = []

    def worker(chunk: list[str]) -> None:
        barrier.wait()
        for name in chunk:
            results.append(PinnedFileStorage(repo).add(name))

    threads = [threading.Thread(target=worker, args=(names[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == len(names)
    assert sorted(pin.file_path for pin in store.list_all()) == sorted(names)


finite = st.floats(allow_nan=False, allow_infinity=False)


@given(
    path=st.text(min_size=1),
    pinned_at=finite,
    last_modified=finite,
    extra=st.dictionaries(
        st.text().filter(lambda k: k not in {"file_path", "pinned_at", "last_modified"}), st.integers()
    ),
)
def test_to_dict_from_dict_round_trip(
    path: str, pinned_at: float, last_modified: float, extra: dict[str, int]
) -> None:
    pin = PinnedFile(path, pinned_at, last_modified)
    payload = {**pin.to_dict(), **extra}
    assert PinnedFile.from_dict(payload) == pin
    assert PinnedFile.from_dict(json.loads(json.dumps(payload))) == pin


@pytest.fixture(scope="module")
def maze(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("maze")
    outside = base / "outside"
    outside.mkdir()
    (outside / "f").write_text("outside")
    root = base / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "f").write_text("x")
    (root / "a" / "b" / "f").write_text("x")
    (root / "f").write_text("x")
    (root / "a" / "up").symlink_to("..")
    (root / "a" / "b" / "upup").symlink_to("../..")
    (root / "out").symlink_to(outside)
    (root / "a" / "outf").symlink_to(outside / "f")
    (root / "dangle").symlink_to(base / "nowhere" / "f")
    return root


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(
        st.sampled_from(["a", "b", "f", "up", "upup", "out", "outf", "dangle", "..", ".", ""]),
        min_size=1,
        max_size=6,
    ),
    sep=st.sampled_from(["/", "\\"]),
)
def test_random_relative_paths_never_escape(maze: Path, parts: list[str], sep: str) -> None:
    store = PinnedFileStorage(maze)
    candidate = sep.join(parts)
    try:
        if store.add(candidate):
            resolved = Path(os.path.realpath(maze / candidate))
            assert resolved.is_relative_to(os.path.realpath(maze))
            assert resolved.is_file()
            assert ".." not in candidate.replace("\\", "/").split("/")
            assert store.list_all()[-1].file_path == candidate
    finally:
        store.clear_all()


# -- pins are re-checked when read (issue 9, item 8) -----------------------------------------------


def _replace_with(repo: Path, tmp_path: Path, kind: str) -> None:
    """Replace the pinned src/app.py after pinning."""
    target = repo / "src" / "app.py"
    target.unlink()
    if kind == "link-outside":
        outside = tmp_path / "outside.txt"
        outside.write_text("private\n")
        target.symlink_to(outside)
    elif kind == "link-to-secret":
        (repo / ".env").write_text("TOKEN=1\n")
        target.symlink_to(repo / ".env")
    elif kind == "link-to-ssh-key":
        home_ssh = tmp_path / "home" / ".ssh"
        home_ssh.mkdir(parents=True)
        (home_ssh / "id_ed25519").write_text("KEY\n")
        target.symlink_to(home_ssh / "id_ed25519")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev-zero":
        target.symlink_to("/dev/zero")
    elif kind == "directory":
        target.mkdir()
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["link-outside", "link-to-secret", "link-to-ssh-key", "fifo", "dev-zero", "directory"])
def test_a_pin_replaced_after_pinning_is_not_listed(
    tmp_path: Path, repo: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PinnedFileStorage(repo)
    assert store.add("src/app.py") and store.add("README.md")
    _replace_with(repo, tmp_path, kind)
    stored = pinned_json(repo).read_bytes()
    with caplog.at_level(logging.WARNING, logger="memstore.pinned"):
        assert [pin.file_path for pin in store.list_all()] == ["README.md"]
        assert store.is_pinned("src/app.py") is False
        assert store.update_last_modified("src/app.py") is False
    assert "src/app.py" in caplog.text
    assert pinned_json(repo).read_bytes() == stored  # hidden, never silently deleted
    assert store.is_pinned("README.md")
    # the user can still unpin it for good
    assert store.remove("src/app.py") is True
    assert [pin["file_path"] for pin in json.loads(pinned_json(repo).read_text())] == ["README.md"]


def test_a_pin_that_today_s_rules_refuse_is_not_listed(repo: Path) -> None:
    # written by an older version whose rules were narrower
    (repo / ".envrc").write_text("export TOKEN=1\n")
    pinned_json(repo).parent.mkdir(parents=True)
    pinned_json(repo).write_text(json.dumps([
        {"file_path": ".envrc", "pinned_at": 1.0, "last_modified": 1.0},
        {"file_path": "README.md", "pinned_at": 1.0, "last_modified": 1.0},
    ]))
    store = PinnedFileStorage(repo)
    assert [pin.file_path for pin in store.list_all()] == ["README.md"]
    assert not store.is_pinned(".envrc")


def test_a_pinned_file_that_was_deleted_is_still_listed(repo: Path) -> None:
    store = PinnedFileStorage(repo)
    assert store.add("src/app.py")
    (repo / "src" / "app.py").unlink()
    assert [pin.file_path for pin in store.list_all()] == ["src/app.py"]
    assert store.is_pinned("src/app.py")


# -- hostile timestamps in pinned.json (issue 9, item 11) ------------------------------------------

HOSTILE_TIMES: list[Any] = [10**400, -(10**400), float("inf"), float("nan"), "1", True, None]


def short_id(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 12 else f"{text[:6]}..{len(text)}chars"


@pytest.mark.parametrize("field", ["pinned_at", "last_modified"])
@pytest.mark.parametrize("value", HOSTILE_TIMES, ids=short_id)
def test_unusable_timestamps_skip_the_pin(repo: Path, field: str, value: Any) -> None:
    pinned_json(repo).parent.mkdir(parents=True)
    bad = {"file_path": "src/app.py", "pinned_at": 1.0, "last_modified": 1.0, field: value}
    good = {"file_path": "README.md", "pinned_at": 1e300, "last_modified": -1e300}
    pinned_json(repo).write_text(json.dumps([bad, good]))
    store = PinnedFileStorage(repo)
    assert [pin.file_path for pin in store.list_all()] == ["README.md"]
    assert store.is_pinned("src/app.py") is False
    assert store.is_pinned("README.md") is True
    assert store.remove("src/app.py") is False
    assert store.remove("README.md") is True


@pytest.mark.parametrize("value", HOSTILE_TIMES, ids=short_id)
def test_from_dict_raises_only_memstore_errors(value: Any) -> None:
    with pytest.raises(MemstoreError):
        PinnedFile.from_dict({"file_path": "a", "pinned_at": value, "last_modified": 1.0})


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_pinned_json_that_is_not_a_regular_file_reads_as_empty(repo: Path, kind: str) -> None:
    pinned_json(repo).parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(pinned_json(repo))
    else:
        pinned_json(repo).symlink_to("/dev/zero")
    store = PinnedFileStorage(repo)
    assert run_bounded(store.list_all) == []
    assert run_bounded(store.is_pinned, "src/app.py") is False


@pytest.mark.parametrize(
    "name",
    [
        # Windows drops trailing dots and spaces from every component: these open the secret itself.
        "server.key.", "server.key ", ".git-credentials.", "x.pem. ", "secrets.json.", ".docker./config.json",
        ".kube /config", ".ssh./id_rsa", ".npmrc. ",
        # NTFS names a file's data stream ``name::$DATA``.
        ".env::$DATA", "id_rsa:stream",
        # Case-insensitive file systems fold case by Unicode rules (long s, Kelvin sign), not by lower().
        "ſecrets.json", ".pgpaſſ", "KEYS/x.\u212aey",
    ],
)
def test_secret_spellings_a_case_insensitive_or_windows_checkout_opens(name: str) -> None:
    assert is_secret_path(name) is not None


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(SECRET_NAMES),
    cases=st.lists(st.booleans(), min_size=64, max_size=64),
    tail=st.text(alphabet=". ", max_size=3),
)
def test_a_secret_stays_secret_under_any_case_and_windows_tail(name: str, cases: list[bool], tail: str) -> None:
    # Any spelling a case-insensitive checkout or Windows opens as the secret is refused as the secret.
    spelled = "".join(char.upper() if flip else char.lower() for char, flip in zip(name, cases * 4, strict=False))
    assert is_secret_path(spelled + tail) is not None

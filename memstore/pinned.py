"""Pinned files: paths inside the repository whose live contents an agent keeps in context.

Pins are stored in ``<root>/.teaagent/memory/pinned.json`` (one JSON array, rewritten
whole and atomically) and every write is a read-modify-write under
``<root>/.teaagent/memory/pinned.lock``.

A pin makes a file's contents flow into prompts, so ``add`` refuses anything that
could leak a secret or reach outside the repository.  Refusals return ``False``
with a logged warning and write nothing; secret *names* are checked before the
filesystem is touched at all.  Rules (decisions the spec leaves open):

- the path must be relative, with no ``..`` component at all (even one that would
  stay inside: the stored path is kept as given, so it must be plain);
- after following symlinks (dangling ones too) it must stay inside the root and
  must not resolve to a secret name either;
- it must be an existing regular file: directories are refused, because a pin is
  the contents of one file and the watcher follows files.

Secret names are one table (:data:`SECRET_RULES`): credential folders, well-known
credential files, dotenv files, key and keystore extensions, Terraform state and
variables, each also under backup and editor decorations (``.bak``, ``~``, ``.1``,
``#name#``, vim swap files).  The same rules are applied again whenever pins are
read: ``list_all`` and ``is_pinned`` skip (with a warning) a pin that would be
refused today, such as a file later replaced by a symlink out of the root or to a
secret, without removing it from pinned.json.

Lookups (``remove``, ``is_pinned``, ``update_last_modified``, duplicate detection)
compare paths after lexical normalisation (``./a.txt`` is ``a.txt``), while the
stored ``file_path`` is always exactly the string that was pinned (invariant 6).
"""

from __future__ import annotations

import os
import posixpath
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstore.checks import check_finite_number, require_mapping, require_path, require_str
from memstore.errors import InvalidArgumentError
from memstore.json_array import JsonArrayFile
from memstore.layout import PINNED_FILE, PINNED_LOCK, ensure_memory_dir, memory_dir
from memstore.logger import LazyLogger

logger = LazyLogger(__name__)

@dataclass(frozen=True, slots=True)
class SecretRule:
    """One way a path can name a secret (compared lowercased).

    ``kind`` says what ``pattern`` is matched against:
    ``dir`` any directory of the path (or the file name itself); ``path`` the last
    components (``.docker/config.json``); ``name`` the file name; ``prefix`` /
    ``suffix`` the start / end of the file name; ``part`` a dot-separated part of the
    file name after its first (``prod.env``, ``.env``, ``x.env.local``); ``data`` a
    substring of a file name ending in a data-file extension (DATA_EXTENSIONS).
    """

    kind: str
    pattern: str
    rule: str


SECRET_RULES: tuple[SecretRule, ...] = (
    # whole directories of credentials
    *(SecretRule("dir", name, rule) for name, rule in (
        (".ssh", "ssh-dir"), (".gnupg", "gnupg-dir"), (".aws", "aws-dir"), (".git", "git-dir"),
        (".kube", "kube-dir"), (".azure", "azure-dir"), (".password-store", "pass-dir"),
    )),
    # well-known credential files inside a tool's folder
    *(SecretRule("path", name, rule) for name, rule in (
        (".docker/config.json", "docker-config"), (".config/gcloud", "gcloud-dir"),
        (".config/gh/hosts.yml", "gh-token"), (".cargo/credentials", "cargo-token"),
        (".cargo/credentials.toml", "cargo-token"), (".gem/credentials", "gem-token"),
        (".terraform.d/credentials.tfrc.json", "terraform-token"),
    )),
    # dotenv files: .env, .envrc, .env-production, .env_local, prod.env, x.env.local
    SecretRule("name", ".env", "env-file"),
    SecretRule("name", ".envrc", "env-file"),
    SecretRule("prefix", ".env.", "env-file"),
    SecretRule("prefix", ".env-", "env-file"),
    SecretRule("prefix", ".env_", "env-file"),
    SecretRule("part", "env", "env-file"),
    # credential files known by name
    *(SecretRule("name", name, rule) for name, rule in (
        (".npmrc", "npmrc"), (".pypirc", "pypirc"), (".netrc", "netrc"), ("_netrc", "netrc"),
        (".git-credentials", "git-credentials"), (".pgpass", "pgpass"), (".my.cnf", "mysql-config"),
        (".htpasswd", "htpasswd"), (".dockercfg", "docker-config"), (".vault-token", "vault-token"),
        (".boto", "boto-config"), (".s3cfg", "s3cfg"),
        ("secrets.json", "secrets-file"), ("secrets.yml", "secrets-file"), ("secrets.yaml", "secrets-file"),
        ("secrets.toml", "secrets-file"), ("credentials", "credentials-file"),
    )),
    *(SecretRule("prefix", name, rule) for name, rule in (
        ("id_rsa", "ssh-private-key"), ("id_ed25519", "ssh-private-key"), ("id_ecdsa", "ssh-private-key"),
        ("id_dsa", "ssh-private-key"), ("client_secret", "oauth-client-secret"),
        ("secring.", "gpg-secret-keyring"),
    )),
    # credentials / service-account data files (credentials.py or credentials.md are code and prose)
    SecretRule("data", "credentials", "credentials-file"),
    SecretRule("data", "service-account", "service-account-json"),
    SecretRule("data", "service_account", "service-account-json"),
    SecretRule("data", "serviceaccount", "service-account-json"),
    *(SecretRule("suffix", name, rule) for name, rule in (
        (".pem", "pem-file"), (".key", "key-file"), (".p12", "pkcs12-file"), (".pfx", "pkcs12-file"),
        (".p8", "pkcs8-key"), (".kdbx", "keepass-db"), (".ppk", "putty-key"), (".jks", "java-keystore"),
        (".keystore", "java-keystore"), (".jceks", "java-keystore"), (".tfstate", "terraform-state"),
        (".tfvars", "terraform-vars"), (".tfvars.json", "terraform-vars"), (".gpg", "gpg-file"),
    )),
)
"""Every secret rule in one place.  Each file name is also tried without backup and
editor decorations (see :func:`name_variants`), so ``server.key.bak``, ``.env~`` and
``#id_rsa#`` are the secrets they copy."""

DATA_EXTENSIONS = frozenset({"json", "yml", "yaml", "toml", "ini", "cfg", "conf", "xml", "txt", "csv", "env"})
"""Extensions of files that hold values rather than code or prose."""

BACKUP_SUFFIXES = (
    ".bak", ".backup", ".old", ".orig", ".save", ".sav", ".tmp", ".temp", ".copy", ".prev", ".rej",
    ".swp", ".swo", ".swn", ".swx", "~",
)
"""Decorations editors, tools and people add to a copy of a file."""
_SWAP_SUFFIXES = (".swp", ".swo", ".swn", ".swx")
_NUMBERED_COPY = re.compile(r"\.[0-9]+$")
MAX_NAME_VARIANTS = 16
"""How many decorations are peeled off one name (a name longer than that is rare; bounded work)."""
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


def _components(path: str) -> list[str]:
    """Split on both separators: a backslash is a separator on Windows checkouts."""
    return [part for part in re.split(r"[/\\]", path) if part]


def name_variants(name: str) -> list[str]:
    """``name`` and the names it copies: backup suffixes, ``~``, ``.1``, ``#...#`` and vim swap files peeled off."""
    variants = [name]
    current = name
    for _ in range(MAX_NAME_VARIANTS):
        peeled = _peel(current)
        if peeled is None:
            break
        current, *extra = peeled
        variants.extend(extra)
        variants.append(current)
    return variants


def _peel(name: str) -> list[str] | None:
    """One decoration less (first), plus the swap file's hidden-name form; None when undecorated."""
    if len(name) > 2 and name.startswith("#") and name.endswith("#"):
        return [name[1:-1]]
    numbered = _NUMBERED_COPY.search(name)
    if numbered and numbered.start() > 0:
        return [name[: numbered.start()]]
    for suffix in BACKUP_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            bare = name[: -len(suffix)]
            if suffix in _SWAP_SUFFIXES and bare.startswith(".") and len(bare) > 1:
                return [bare, bare[1:]]  # vim keeps .name.swp beside name
            return [bare]
    return None


def _spellings(part: str) -> list[str]:
    """The names one path component can open on the checkouts memstore runs on.

    Case-insensitive file systems fold case by Unicode rules (``ſ`` is ``s``), and
    Windows drops trailing dots and spaces and reads ``name:stream`` from ``name``.
    """
    folded = part.casefold()
    spellings = [folded]
    for bare in (folded.rstrip(". "), folded.partition(":")[0].rstrip(". ")):
        if bare and bare not in spellings and folded not in (".", ".."):
            spellings.append(bare)
    return spellings


def _rule_matches(rule: SecretRule, dirs: list[str], names: list[str]) -> bool:
    if rule.kind == "dir":
        return rule.pattern in dirs or rule.pattern in names
    if rule.kind == "path":
        tail = rule.pattern.split("/")
        head, last = tail[:-1], tail[-1]
        if len(dirs) >= len(head) and dirs[len(dirs) - len(head) :] == head and last in names:
            return True
        # a listed folder (``.config/gcloud``) covers everything below it
        return any(dirs[i : i + len(tail)] == tail for i in range(len(dirs) - len(tail) + 1))
    for name in names:
        if rule.kind == "name" and name == rule.pattern:
            return True
        if rule.kind == "prefix" and name.startswith(rule.pattern):
            return True
        if rule.kind == "suffix" and name.endswith(rule.pattern):
            return True
        if rule.kind == "part" and rule.pattern in name.split(".")[1:]:
            return True
        if rule.kind == "data" and rule.pattern in name and name.rpartition(".")[2] in DATA_EXTENSIONS:
            return True
    return False


def is_secret_path(path: str) -> str | None:
    """Return the name of the secret rule ``path`` matches, or ``None``.

    Pure: looks at the spelling only (case-insensitively, since checkouts on
    macOS and Windows are), never at the filesystem.
    """
    parts = [_spellings(part) for part in _components(require_str("path", path))]
    if not parts:
        return None
    dirs = [variant for spellings in parts[:-1] for spelling in spellings for variant in name_variants(spelling)]
    names = [variant for spelling in parts[-1] for variant in name_variants(spelling)]
    for rule in SECRET_RULES:
        if _rule_matches(rule, dirs, names):
            return rule.rule
    return None


def _lexical_refusal(path: str) -> str | None:
    """Reasons to refuse that need no filesystem access, secrets first."""
    if "\x00" in path:
        return "path contains a NUL byte"
    if not path.strip():
        return "path is empty"
    rule = is_secret_path(path)
    if rule is not None:
        return f"path looks like a secret ({rule})"
    if path.startswith(("/", "\\")) or _WINDOWS_DRIVE.match(path):
        return "path must be relative to the root"
    if ".." in _components(path):
        return "path must not contain '..'"
    return None


def _path_key(path: str) -> str:
    """Lexical identity of a pinned path, used for lookups and duplicate detection."""
    return posixpath.normpath(path.replace("\\", "/"))


def _timestamp(payload: Mapping[str, Any], key: str) -> float:
    return check_finite_number(key, payload[key])


@dataclass
class PinnedFile:
    """One pin: ``file_path`` exactly as it was pinned (relative), plus two Unix timestamps."""

    file_path: str
    pinned_at: float
    last_modified: float

    def to_dict(self) -> dict[str, Any]:
        return {"file_path": self.file_path, "pinned_at": self.pinned_at, "last_modified": self.last_modified}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> PinnedFile:
        """Rebuild a pin; unknown keys are ignored, missing or ill-typed known keys raise.

        Timestamps must be numbers that are finite as floats (``10**400``, ``inf``,
        strings and bools raise ``MemstoreError``s); readers skip such a pin.
        """
        require_mapping("payload", payload)
        try:
            file_path = payload["file_path"]
            if not isinstance(file_path, str) or not file_path:
                raise InvalidArgumentError("file_path must be a non-empty str")
            return cls(file_path, _timestamp(payload, "pinned_at"), _timestamp(payload, "last_modified"))
        except KeyError as exc:
            raise InvalidArgumentError(f"pinned file payload lacks {exc.args[0]!r}") from None


class PinnedFileStorage:
    """The pinned-file list of one repository root."""

    def __init__(self, root: Path | str) -> None:
        self.root = require_path("root", root)
        self.directory = memory_dir(self.root)
        self.path = self.directory / PINNED_FILE
        self._file = JsonArrayFile(self.path, self.directory / PINNED_LOCK, prepare=self._prepare_write)

    # -- reading -------------------------------------------------------------------------

    def _read_pinned_files(self) -> list[PinnedFile]:
        """All readable pins; an unreadable file is ``[]`` and a bad element is skipped."""
        return [pin for _, pin in _pins_of(self._file.read(), self.path)]

    def _visible_pins(self) -> list[PinnedFile]:
        """The pins that pass the safety rules today; the others are skipped with a warning.

        A pin is re-checked on every read, because the rules widen and the file can be
        replaced after pinning (by a symlink to a secret or out of the root, a FIFO).
        A skipped pin stays in pinned.json (``remove`` still finds it): a read never
        changes the file.  A pinned file that no longer exists is still listed.
        """
        visible: list[PinnedFile] = []
        for pin in self._read_pinned_files():
            reason = self._refusal(pin.file_path, must_exist=False)
            if reason is None:
                visible.append(pin)
            else:
                logger.warning("not listing pinned %r: %s", pin.file_path, reason)
        return visible

    def list_all(self) -> list[PinnedFile]:
        """Every pin that still passes the rules ``add`` applies (see :meth:`_visible_pins`)."""
        return self._visible_pins()

    def is_pinned(self, file_path: str) -> bool:
        """True when a pin of this path is listed by :meth:`list_all`."""
        key = _path_key(require_str("file_path", file_path))
        return any(_path_key(pin.file_path) == key for pin in self._visible_pins())

    # -- writing -------------------------------------------------------------------------

    def _prepare_write(self) -> None:
        ensure_memory_dir(self.root)

    def _modify(self, change: Callable[[list[PinnedFile]], bool]) -> bool:
        """Read, let ``change`` edit the pins in place, write them back if it says so; all under the lock.

        The rewrite keeps every stored element that is not a pin, and every key a pin
        carries that this version does not know, exactly as it was.
        """

        def edit(records: list[Any]) -> tuple[bool, bool]:
            parsed = _pins_of(records, self.path)
            pins = [pin for _, pin in parsed]
            originals = {id(pin): records[order] for order, pin in parsed}
            pin_orders = {order for order, _ in parsed}
            if not change(pins):
                return False, False
            kept = {id(pin) for pin in pins}
            survivors = [pin for _, pin in parsed if id(pin) in kept]
            new = [pin for pin in pins if id(pin) not in originals]
            position = {id(pin): index for index, pin in enumerate(pins)}
            survivors.sort(key=lambda pin: position[id(pin)])
            rebuilt = _interleave(records, pin_orders, [_record(pin, originals.get(id(pin))) for pin in survivors])
            records[:] = [*rebuilt, *(pin.to_dict() for pin in new)]
            return True, True

        return self._file.update(edit)

    def refusal(self, file_path: str) -> str | None:
        """Why ``add`` would refuse ``file_path`` (secret, outside the root, missing, ...); None if it may pin.

        The same checks ``add`` makes, for callers that must tell the reason (the MCP server);
        "already pinned" is not among them, it is decided under the lock.
        """
        return self._refusal(require_str("file_path", file_path))

    def _refusal(self, file_path: str, *, must_exist: bool = True) -> str | None:
        """Why ``file_path`` cannot be (or stay) pinned; None when it can."""
        reason = _lexical_refusal(file_path)
        if reason is not None:
            return reason
        try:
            root = os.path.realpath(self.root)
            target = os.path.realpath(os.path.join(root, file_path))
        except (OSError, ValueError) as exc:
            return f"path cannot be resolved ({exc})"
        if target == root:
            return "path is the root itself"
        if os.path.commonpath([root, target]) != root:
            return "path resolves outside the root"
        rule = is_secret_path(os.path.relpath(target, root))
        if rule is not None:
            return f"path resolves to a secret ({rule})"
        if not os.path.exists(target):
            return "file does not exist" if must_exist else None
        if not os.path.isfile(target):
            return "not a regular file (directories cannot be pinned)"
        return None

    def add(self, file_path: str) -> bool:
        """Pin ``file_path`` (relative to the root); ``False`` with a warning when refused."""
        require_str("file_path", file_path)
        reason = self._refusal(file_path)
        if reason is not None:
            logger.warning("refusing to pin %r: %s", file_path, reason)
            return False
        try:
            modified = os.stat(os.path.join(self.root, file_path)).st_mtime
        except OSError as exc:
            logger.warning("refusing to pin %r: %s", file_path, exc.strerror or exc)
            return False
        key = _path_key(file_path)

        def append(pins: list[PinnedFile]) -> bool:
            if any(_path_key(pin.file_path) == key for pin in pins):
                return False
            pins.append(PinnedFile(file_path, time.time(), modified))
            return True

        if not self._modify(append):
            logger.warning("refusing to pin %r: already pinned", file_path)
            return False
        return True

    def remove(self, file_path: str) -> bool:
        key = _path_key(require_str("file_path", file_path))
        if not self.path.exists():
            return False

        def drop(pins: list[PinnedFile]) -> bool:
            kept = [pin for pin in pins if _path_key(pin.file_path) != key]
            if len(kept) == len(pins):
                return False
            pins[:] = kept
            return True

        return self._modify(drop)

    def clear_all(self) -> None:
        def empty(pins: list[PinnedFile]) -> bool:
            pins.clear()
            return True

        self._modify(empty)

    def update_last_modified(self, file_path: str) -> bool:
        """Stamp the pin's ``last_modified`` with the current time; ``False`` if not pinned."""
        key = _path_key(require_str("file_path", file_path))
        if not self.path.exists():
            return False

        if not self.is_pinned(file_path):
            return False

        def stamp(pins: list[PinnedFile]) -> bool:
            found = False
            now = time.time()
            for pin in pins:
                if _path_key(pin.file_path) == key:
                    pin.last_modified = now
                    found = True
            return found

        return self._modify(stamp)


def _pins_of(records: list[Any], path: Path) -> list[tuple[int, PinnedFile]]:
    """``(position, pin)`` for every stored element that is a valid pin."""
    pins = []
    for order, item in enumerate(records):
        try:
            pins.append((order, PinnedFile.from_dict(item)))
        except (TypeError, ValueError):
            logger.warning("skipping malformed pinned-file entry in %s", path)
    return pins


def _record(pin: PinnedFile, original: Any) -> Any:
    """A pin as stored: its original object (unknown keys kept) with the known keys updated."""
    if isinstance(original, dict):
        return {**original, **pin.to_dict()}
    return pin.to_dict()


def _interleave(records: list[Any], pin_orders: set[int], pins: list[Any]) -> list[Any]:
    """The stored elements with the pin slots refilled by ``pins`` in order (extra slots dropped)."""
    out: list[Any] = []
    remaining = iter(pins)
    for order, record in enumerate(records):
        if order not in pin_orders:
            out.append(record)
            continue
        pin = next(remaining, None)
        if pin is not None:
            out.append(pin)
    out.extend(remaining)
    return out

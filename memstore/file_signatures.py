"""SHA-256 signatures of workspace files: what auto-invalidation compares to notice a change.

A signature is the hex SHA-256 of a file's bytes, ``None`` for a file that does not
exist, or ``UNKNOWN`` for one that exists but cannot be read (never a change, never
a baseline).  Only a regular file inside the root of at most MAX_SIGNATURE_BYTES has
one: a path that resolves outside the root (absolute, ``..``, a symlink out), a FIFO,
a device, a directory or a larger file is UNKNOWN, and opening never waits.
"""

from __future__ import annotations

import hashlib
import os
from fnmatch import fnmatchcase
from pathlib import Path

from memstore.files import READ_CHUNK, open_regular, storage_error
from memstore.logger import LazyLogger

logger = LazyLogger(__name__)

DEPENDENCY_MANIFESTS = frozenset(
    {
        "pyproject.toml",
        "setup.cfg",
        "setup.py",
        "Pipfile",
        "Pipfile.lock",
        "poetry.lock",
        "uv.lock",
        "pdm.lock",
        "constraints.txt",
        "environment.yml",
        "package.json",
        "package-lock.json",
        "npm-shrinkwrap.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "bun.lockb",
        "Cargo.toml",
        "Cargo.lock",
        "go.mod",
        "go.sum",
        "Gemfile",
        "Gemfile.lock",
        "composer.json",
        "composer.lock",
    }
)
DEPENDENCY_PATTERNS = ("requirements*.txt",)

MAX_SIGNATURE_BYTES = 64 * 1024 * 1024
"""Files larger than this get no signature (never a change): hashing must stay bounded."""


class Unknown:
    """A file that exists but could not be read: never a change, never a baseline."""


UNKNOWN = Unknown()
Signature = str | None | Unknown
"""SHA-256 hex of the bytes, ``None`` for a missing file, UNKNOWN when unreadable."""


class SignatureCache:
    """Signatures of one auto-invalidation run: each file (and the manifests) hashed once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[str, Signature] = {}
        self._dependencies: Signature | None = None
        self._dependencies_done = False

    def file(self, path: str) -> Signature:
        if path not in self._files:
            self._files[path] = file_signature(self.root, path)
        return self._files[path]

    def dependencies(self) -> Signature:
        if not self._dependencies_done:
            self._dependencies = dependency_signature(self.root)
            self._dependencies_done = True
        return self._dependencies


def inside_root(root: Path, path: str) -> str | None:
    """``path`` (relative to ``root``) with every link resolved, or None when it leaves the root."""
    if not path or "\x00" in path:
        return None
    try:
        real_root = os.path.realpath(root)
        target = os.path.realpath(os.path.join(real_root, path))
    except (OSError, ValueError):
        return None
    if target == real_root or os.path.commonpath([real_root, target]) != real_root:
        return None
    return target


def file_signature(root: Path, path: str) -> Signature:
    """SHA-256 of a regular file inside ``root``; None when missing; UNKNOWN for anything else.

    The path is resolved first (links included) and must stay inside the root; the
    resolved file is opened without following a link, without blocking, and hashed
    only when it is a regular file of at most MAX_SIGNATURE_BYTES.
    """
    target = inside_root(root, path)
    if target is None:
        return UNKNOWN
    try:
        fd = open_regular(Path(target), max_bytes=MAX_SIGNATURE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return UNKNOWN
    digest = hashlib.sha256()
    total = 0
    try:
        while chunk := os.read(fd, READ_CHUNK):
            total += len(chunk)
            if total > MAX_SIGNATURE_BYTES:
                return UNKNOWN
            digest.update(chunk)
    except OSError:
        return UNKNOWN
    finally:
        os.close(fd)
    return digest.hexdigest()


def dependency_signature(root: Path) -> Signature:
    """One SHA-256 over the names and hashes of the dependency files in ``root``."""
    try:
        with os.scandir(root) as entries:
            names = sorted(
                entry.name
                for entry in entries
                if (
                    entry.name in DEPENDENCY_MANIFESTS
                    or any(fnmatchcase(entry.name, pattern) for pattern in DEPENDENCY_PATTERNS)
                )
                and entry.is_file()
            )
    except FileNotFoundError:
        names = []
    except OSError as exc:
        logger.warning("%s", storage_error("list", root, exc))
        return UNKNOWN
    combined = hashlib.sha256()
    for name in names:
        signature = file_signature(root, name)
        if isinstance(signature, Unknown):
            return UNKNOWN
        if signature is not None:
            combined.update(f"{name}\0{signature}\n".encode())
    return combined.hexdigest()

"""Where a workspace's files live under ``<root>/.teaagent/``, and creating that folder.

The store folder is created by the first write, never by a read.  Whoever creates
it also writes ``.gitattributes`` (union merges for the append-only line files, the
``memstore-json`` driver for the JSON arrays) and ``.gitignore`` (locks, the index,
temp and backup files), so a store committed to git merges cleanly from the start.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from memstore.files import DEFAULT_FILE_MODE, atomic_write, ensure_dir, fsync_dir, read_regular_file, storage_error

STORE_DIRNAME = ".teaagent"
CATALOG_FILE = "memory.jsonl"
QUARANTINE_FILE = "memory-quarantine.jsonl"
TEAM_FILE = "team-memory.md"
MEMORY_DIRNAME = "memory"
FAILURES_FILE = "failures.json"
PINNED_FILE = "pinned.json"
CONFIG_FILE = "config.json"
"""Workspace settings (auto-invalidation rules), beside the catalog."""
CATALOG_LOCK = "memory.lock"
"""The one lock of every writer of memory.jsonl and memory-quarantine.jsonl."""
TEAM_LOCK = "team-memory.lock"
FAILURES_LOCK = "failures.lock"
PINNED_LOCK = "pinned.lock"
LINE_FILES = (CATALOG_FILE, QUARANTINE_FILE, TEAM_FILE)
"""Append-only line files: a union of both sides is a correct merge."""
JSON_ARRAY_FILES = (f"{MEMORY_DIRNAME}/{FAILURES_FILE}", f"{MEMORY_DIRNAME}/{PINNED_FILE}")
"""Whole-file JSON arrays: merged by id through ``memstore merge-json``."""
MERGE_DRIVER = "memstore-json"

GITATTRIBUTES = "".join(
    [
        "# memstore: append-only line files merge as the union of both sides\n",
        *(f"/{name} merge=union\n" for name in LINE_FILES),
        "# JSON arrays merge by id (register the driver with `memstore init --git`)\n",
        *(f"/{name} merge={MERGE_DRIVER}\n" for name in JSON_ARRAY_FILES),
    ]
)
GITIGNORE = (
    "# memstore: derived and transient files (the canonical files are tracked)\n"
    "*.lock\n"
    "/index/\n"
    "*.tmp\n"
    "*.torn-*\n"
    "*.corrupt-*\n"
    "*.backup-*\n"
)
GIT_FILES = {".gitattributes": GITATTRIBUTES, ".gitignore": GITIGNORE}
GIT_FILE_MAX_BYTES = 1024 * 1024
"""A .gitattributes or .gitignore larger than this is not a file memstore merges its lines into."""


def store_dir(root: str | os.PathLike[str]) -> Path:
    """``<root>/.teaagent``."""
    return Path(root) / STORE_DIRNAME


def memory_dir(root: str | os.PathLike[str]) -> Path:
    """``<root>/.teaagent/memory`` (failures.json and pinned.json), created only by a write."""
    return store_dir(root) / MEMORY_DIRNAME


def has_store(root: str | os.PathLike[str]) -> bool:
    """Whether ``root`` holds a store folder (a read on a root without one answers empty)."""
    return store_dir(root).is_dir()


def ensure_store(directory: Path, *, private: bool = False) -> None:
    """Create ``directory`` (and parents) for a write; a new ``.teaagent`` gets its git files.

    Only a folder named ``.teaagent`` is a project store: the personal tier's folder
    is not in a repository and gets no git files.
    """
    created = not directory.is_dir()
    ensure_dir(directory, private=private)
    if created and directory.name == STORE_DIRNAME:
        write_git_files(directory)


def ensure_memory_dir(root: Path) -> Path:
    """``<root>/.teaagent/memory``, created (with the store's git files when new) for a write."""
    top = store_dir(root)
    if not top.is_dir():
        ensure_store(top)
    directory = top / MEMORY_DIRNAME
    ensure_dir(directory)
    return directory


def write_git_files(directory: Path, *, overwrite: bool = False) -> list[Path]:
    """Write ``.gitattributes`` and ``.gitignore`` into a store folder; returns the files written.

    An existing file is left alone unless ``overwrite`` (``memstore init`` adds only
    the lines it lacks, see :func:`merge_git_file`).
    """
    written = []
    for name, text in GIT_FILES.items():
        path = directory / name
        if overwrite:
            new = merge_git_file(path, text)
            if new is None:
                continue
            atomic_write(path, new.encode("utf-8"))
            written.append(path)
            continue
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, DEFAULT_FILE_MODE)
        except FileExistsError:
            continue
        except OSError as exc:
            raise storage_error("create", path, exc) from exc
        try:
            os.write(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        written.append(path)
    with contextlib.suppress(OSError):
        fsync_dir(directory)
    return written


def merge_git_file(path: Path, wanted: str) -> str | None:
    """The file's text with the missing lines of ``wanted`` appended; None when nothing is missing."""
    try:
        data = read_regular_file(path, max_bytes=GIT_FILE_MAX_BYTES)  # never through a link, never blocking
    except FileNotFoundError:
        return wanted
    try:
        current = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise storage_error("read", path, OSError(str(exc))) from None
    have = {line.strip() for line in current.splitlines()}
    missing = [line for line in wanted.splitlines() if line.strip() and line.strip() not in have]
    if not missing:
        return None
    prefix = current if current.endswith("\n") or not current else current + "\n"
    return prefix + "\n".join(missing) + "\n"

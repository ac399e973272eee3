"""Rewriting memory.jsonl without some entries, with most of the work done outside the writer lock.

Writers only ever append, so the part of the file before its last newline does not
change while the inode stays the same (memstore cuts back only torn or failed bytes
after it).  A rewrite therefore scans that part and copies what it keeps into the
new file without the lock (:func:`prepare`), fsynced, and under the lock only checks
the inode and the size, scans and copies what was appended meanwhile, and replaces
the file (:func:`finish`).  When the file was replaced in between (another rewrite,
a checkout), the whole rewrite is done under the lock, as before.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memstore.errors import StorageError
from memstore.files import Replacement, last_line_end, open_for_read, storage_error
from memstore.index.catalog_index import RewritePlan
from memstore.lines_seen import still_holds
from memstore.models import MemoryEntry
from memstore.rewrite_scan import RemovalScan, scan_for_removal


@dataclass
class Prepared:
    """The rewrite of bytes ``[0, upto)`` of one inode, made without the writer lock."""

    dev: int
    ino: int
    upto: int
    scan: RemovalScan
    replacement: Replacement | None
    """The new file so far (fsynced), or None when nothing before ``upto`` goes."""

    def discard(self) -> None:
        if self.replacement is not None:
            self.replacement.discard()


@dataclass
class Rewritten:
    removed: list[MemoryEntry]
    plan: RewritePlan
    after: os.stat_result


def prepare(path: Path, *, key: str, value: str) -> Prepared | None:
    """Scan and copy the file up to its last newline; None when there is no file."""
    fd = open_for_read(path)
    if fd is None:
        return None
    try:
        try:
            st = os.fstat(fd)
            upto = last_line_end(fd, st.st_size)
            scan = scan_for_removal(fd, upto, key=key, value=value, prove=True)
        except OSError as exc:
            raise storage_error("read", path, exc) from exc
        replacement = None
        if scan.removed:
            replacement = Replacement(path, digest=True)
            try:
                replacement.copy(fd, scan.kept)
                replacement.sync()
            except BaseException:
                replacement.discard()
                raise
        return Prepared(st.st_dev, st.st_ino, upto, scan, replacement)
    finally:
        os.close(fd)


def finish(
    path: Path,
    fd: int,
    prepared: Prepared | None,
    *,
    key: str,
    value: str,
    before: Callable[[list[MemoryEntry]], None] | None,
) -> Rewritten | None:
    """Under the writer lock: complete the rewrite of the open file ``fd``; None when nothing goes.

    ``before`` runs ahead of the replace (quarantine appends the entries there first).
    """
    try:
        st = os.fstat(fd)
        if (
            prepared is not None
            and (prepared.dev, prepared.ino) == (st.st_dev, st.st_ino)
            and st.st_size >= prepared.upto
            and _unchanged(fd, prepared)
        ):
            head, rest = prepared.scan, scan_for_removal(fd, st.st_size, key=key, value=value, start=prepared.upto)
            replacement = prepared.replacement
        else:
            if prepared is not None:
                prepared.discard()
            head, rest = RemovalScan(), scan_for_removal(fd, st.st_size, key=key, value=value)
            replacement = None
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error("read", path, exc) from exc
    removed = head.removed + rest.removed
    if not removed:
        if replacement is not None:
            replacement.discard()
        return None
    try:
        _still_at_path(path, st)
        if before is not None:
            before(removed)
        if replacement is None:
            replacement = Replacement(path, digest=True)
            replacement.copy(fd, head.kept)
        replacement.copy(fd, rest.kept)
        replacement.write(rest.tail)
        written = replacement.hasher.pack() if replacement.hasher is not None else b""
        _still_at_path(path, st)
        after = replacement.commit()
    finally:
        if replacement is not None:
            replacement.discard()
    plan = RewritePlan(
        before=st,
        removed=frozenset(head.removed_starts | rest.removed_starts),
        dropped=tuple(head.dropped + rest.dropped),
        written=written,
    )
    return Rewritten(removed, plan, after)


class FileReplacedError(StorageError):
    """Another tool replaced the file while it was being rewritten: nothing was removed."""


def _still_at_path(path: Path, st: os.stat_result) -> None:
    """The path still names the file being rewritten (a checkout may have put another there)."""
    try:
        now = os.stat(path)
    except OSError as exc:
        raise storage_error("stat", path, exc) from exc
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        message = f"{path} was replaced by another tool during the rewrite; nothing was removed"
        raise FileReplacedError(errno.EAGAIN, message)


def _unchanged(fd: int, prepared: Prepared) -> bool:
    """The part copied without the lock is still what the file holds.

    Memstore's writers only append, but another tool may have saved the file in place
    meanwhile (same inode): its edit must not be lost to a copy taken before it.
    """
    seen = prepared.scan.seen
    return seen is not None and still_holds(fd, [seen])

"""Rewriting memory.jsonl without some entries, with most of the work done outside the writer lock.

Writers only ever append, so the part of the file before its last newline does not
change while the inode stays the same (memstore cuts back only torn or failed bytes
after it).  A rewrite therefore scans that part without the lock (:func:`prepare`),
writing the lines it keeps into the new file from the very blocks it scans, fsynced.
Under the lock (:func:`finish`) it proves the file still holds every byte that pass
read (another tool may have saved it in place: :mod:`memstore.kept_copy`), scans and
copies what was appended meanwhile, and replaces the file.  When the file was
replaced or edited in between, the whole rewrite is done under the lock.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memstore.background import Background
from memstore.errors import StorageError
from memstore.files import Replacement, last_line_end, open_for_read, storage_error
from memstore.index.catalog_index import RewritePlan
from memstore.kept_copy import CopySeen, KeptCopy
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
    """The new file so far, or None when nothing before ``upto`` goes."""
    seen: CopySeen | None
    """What the copy was made from, proven again under the lock before it is used."""
    syncing: Background[None] | None = None
    """The fsync of ``replacement``, left running while the lock is taken and the copy proven."""

    def settle(self) -> None:
        """Wait for the fsync of the copy; raise its error."""
        syncing, self.syncing = self.syncing, None
        if syncing is not None:
            syncing.result()

    def discard(self) -> None:
        try:
            self.settle()
        except StorageError:
            pass  # the copy is thrown away anyway
        finally:
            if self.replacement is not None:
                self.replacement.discard()


@dataclass
class Rewritten:
    removed: list[MemoryEntry]
    plan: RewritePlan
    after: os.stat_result


def prepare(path: Path, *, key: str, value: str) -> Prepared | None:
    """Scan the file up to its last newline, copying what stays as it goes.

    None when there is no file, or when another tool cut or edited it while the copy read
    it again (a short read): :func:`finish` then does the whole rewrite under the lock.
    """
    fd = open_for_read(path)
    if fd is None:
        return None
    copy: KeptCopy | None = None
    try:
        try:
            st = os.fstat(fd)
        except OSError as exc:
            raise storage_error("read", path, exc) from exc
        try:
            upto = last_line_end(fd, st.st_size)
            copy = KeptCopy(fd, 0, lambda: Replacement(path, digest=True, direct=True))
            scan = scan_for_removal(fd, upto, key=key, value=value, copy=copy)
        except OSError as exc:
            if _changed_since(fd, st):
                if copy is not None and copy.replacement is not None:
                    copy.replacement.discard()
                return None
            if isinstance(exc, StorageError):
                raise  # the copy's own error says what failed
            raise storage_error("read", path, exc) from exc
        seen = copy.seen(upto, scan.dropped)
        replacement = copy.replacement
        syncing = None
        if replacement is not None and scan.removed:
            # Disk time that the proof under the lock hides.
            syncing = Background(replacement.sync, name="memstore-rewrite-sync")
        elif replacement is not None:
            replacement.discard()  # only blank lines went: nothing to rewrite for
            replacement = None
        return Prepared(st.st_dev, st.st_ino, upto, scan, replacement, seen, syncing)
    except BaseException:
        if copy is not None and copy.replacement is not None:
            copy.replacement.discard()
        raise
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
    replacement: Replacement | None = None
    try:
        try:
            st = os.fstat(fd)
            if prepared is not None and _unchanged(fd, st, prepared):
                prepared.settle()
                head, replacement = prepared.scan, prepared.replacement
                prepared.replacement = None  # this call discards it from here on
                if replacement is not None:
                    rest = scan_for_removal(
                        fd, st.st_size, key=key, value=value, start=prepared.upto, copy=KeptCopy.into(fd, replacement)
                    )
                else:  # nothing went before ``upto``: what follows is copied only if something goes there
                    rest = scan_for_removal(fd, st.st_size, key=key, value=value, start=prepared.upto)
                    if rest.removed:
                        replacement = Replacement(path, digest=True, direct=True)
                        replacement.copy(fd, [*head.kept, *rest.kept])
            else:
                if prepared is not None:
                    prepared.discard()
                head, copy = RemovalScan(), KeptCopy(fd, 0, lambda: Replacement(path, digest=True, direct=True))
                try:
                    rest = scan_for_removal(fd, st.st_size, key=key, value=value, copy=copy)
                finally:
                    replacement = copy.replacement
        except StorageError:
            raise
        except OSError as exc:
            raise storage_error("read", path, exc) from exc
        removed = head.removed + rest.removed
        if not removed or replacement is None:
            return None
        _still_at_path(path, st)
        if before is not None:
            before(removed)
        replacement.write(rest.tail)
        written = replacement.hasher.pack() if replacement.hasher is not None else b""
        _still_at_path(path, st)
        after = replacement.commit(before_rename=lambda: _not_changed(path, fd, st))
        renamed = replacement.renamed
        direct = replacement.direct_bytes > 0
    finally:
        if replacement is not None:
            replacement.discard()
    plan = RewritePlan(
        before=st,
        removed=frozenset(head.removed_starts | rest.removed_starts),
        dropped=tuple(head.dropped + rest.dropped),
        written=written,
        key=key,
        value=value,
        direct=direct,
        renamed=renamed,
    )
    return Rewritten(removed, plan, after)


class FileReplacedError(StorageError):
    """Another tool replaced the file, or wrote to it, while it was being rewritten: nothing was removed."""


def _still_at_path(path: Path, st: os.stat_result) -> None:
    """The path still names the file being rewritten (a checkout may have put another there)."""
    try:
        now = os.stat(path)
    except OSError as exc:
        raise storage_error("stat", path, exc) from exc
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        message = f"{path} was replaced by another tool during the rewrite; nothing was removed"
        raise FileReplacedError(errno.EAGAIN, message)


def _not_changed(path: Path, fd: int, st: os.stat_result) -> None:
    """Right before the rename: nothing was appended to (or saved into) the file since it was read.

    Other tools append without memstore's lock; bytes they wrote after ``st`` are in no
    copy, and the rename would drop them.  The rewrite is then tried again from the file
    as it is (the window left is this check to the rename, not the final fsync).
    """
    if _changed_since(fd, st):
        message = f"{path} was written by another tool during the rewrite; nothing was removed"
        raise FileReplacedError(errno.EAGAIN, message)


def _changed_since(fd: int, st: os.stat_result) -> bool:
    """The open file is no longer as ``st`` found it (an in-place save changes its ctime)."""
    try:
        now = os.fstat(fd)
    except OSError:
        return False
    return (now.st_size, now.st_mtime_ns, now.st_ctime_ns) != (st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _unchanged(fd: int, st: os.stat_result, prepared: Prepared) -> bool:
    """The part scanned and copied without the lock is still what the file holds.

    Memstore's writers only append, but another tool may have saved the file in place
    meanwhile (same inode): its edit must not be lost to a copy taken before it.
    """
    return (
        (prepared.dev, prepared.ino) == (st.st_dev, st.st_ino)
        and st.st_size >= prepared.upto
        and prepared.seen is not None
        and prepared.seen.holds(fd)
    )

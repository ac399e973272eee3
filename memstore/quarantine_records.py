"""Which entries of a branch the quarantine file records already: a move is never recorded twice.

``quarantine_by_branch`` appends the entries durably before it replaces memory.jsonl.
When the replace is refused (another tool kept writing the file) or the process dies in
between, the entries are in both files, and the caller tries again: the second call must
find them recorded and only remove them from memory.jsonl.

An entry is "the same" when its fields are: the canonical encoding of the entry parsed
from a quarantine line, with the line's own ``quarantine`` and ``provenance`` (and any key
an entry does not have) left out.  So a record written by an older memstore or another
tool, with other spacing or key order, counts; an entry with the same id but other
content does not (moving it records it, nothing is lost).  Records are counted, not just
noted: memory.jsonl may hold byte-identical copies of an entry, and each copy moved has
its record.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from memstore.errors import StorageError
from memstore.files import open_for_read, storage_error
from memstore.jsonl import encode_entry
from memstore.models import MemoryEntry
from memstore.rewrite_scan import scan_for_removal


def entry_key(entry: MemoryEntry) -> bytes:
    """What identifies an entry in both files: its canonical line, without quarantine fields."""
    return encode_entry(entry)


def recorded_of_branch(path: Path, branch_name: str) -> Counter[bytes]:
    """The records in the quarantine file at ``path`` of entries whose branch is ``branch_name``.

    Read under the writer lock (every writer of the file takes it), with the rewrite's
    byte prefilter: only lines that may name the branch are parsed, so the cost is one
    pass over the file at memchr speed.
    """
    fd = open_for_read(path)
    if fd is None:
        return Counter()
    try:
        size = os.fstat(fd).st_size
        found = scan_for_removal(fd, size, key="branch_name", value=branch_name)
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error("read", path, exc) from exc
    finally:
        os.close(fd)
    return Counter(entry_key(entry) for entry in found.removed)


def not_yet_recorded(entries: Iterable[MemoryEntry], recorded: Counter[bytes]) -> list[MemoryEntry]:
    """``entries`` less one of each that a record in ``recorded`` already stands for."""
    left = recorded.copy()
    fresh = []
    for entry in entries:
        key = entry_key(entry)
        if left[key] > 0:
            left[key] -= 1
        else:
            fresh.append(entry)
    return fresh

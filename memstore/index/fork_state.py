"""Index files a forked child must not open through SQLite: its parent was using them at the fork.

SQLite's unix VFS keeps one record per process of each open database inode and of its
``-shm`` locks, shared by every connection of the process to that inode, and asks the
kernel for a lock only when no connection of the process holds it already.  POSIX
record locks are not inherited across ``fork()``; that record is, with the parent's
connections in it.  A connection inherited across fork is never used in the child, and
one inside a transaction never closed (its rollback would edit the ``-shm`` the parent
still uses): those never leave the record.

So a child that opens its own connection to a file its parent was using at the fork:

- finds every lock the parent held *exclusively* held for ever (the write transaction a
  rewrite holds from before its replace to its follow-up, a checkpoint): each catch-up
  waited the whole busy timeout and then answered from a scan;
- takes the locks the parent held *shared* (the read-mark slot of any open transaction)
  in that record only: no other process can see them, and a writer elsewhere may restart
  the log under the child's read.

Such a child therefore does not open that file (:func:`refuses`): its reads answer from a
scan at once, which is exact, and it uses the index again when the path holds another
file.  The parent and every other process are untouched: the child never held their locks.

A connection idle at the fork holds no lock of a transaction, but it is in that record too,
with the shared locks every open connection holds for its life (the database's, the
``-shm``'s "in use" byte): a connection the child opened beside it found them held and
never asked the kernel.  Once the parent let go of the file, other processes saw nobody
using it, deleted the ``-wal`` and ``-shm`` the child went on using, and the child's
writes, folded back from its stale view, broke the file for all.  So the child closes the
connections it inherited idle before it opens that file (:func:`may_open`): the
record empties and its own connection takes its locks at the kernel.  Closing an idle
connection is safe for the others: there is no transaction to roll back, its locks (never
the child's at the kernel) are released in the record only, and it folds the log back only
when it gets the file's exclusive lock at the kernel, as any last connection does.
Connections this module never saw (user code's own ``sqlite3.connect`` to the file) are in
that record too and cannot be closed for the child: while a descriptor of the file it inherited
is open, the child does not open it (:func:`_held_elsewhere`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import weakref
from collections import Counter
from collections.abc import Iterator

from memstore.index.trust import Generation

_OPEN: weakref.WeakKeyDictionary[sqlite3.Connection, Generation] = weakref.WeakKeyDictionary()
"""This process's index connections, with the file (dev, ino) each has open."""
_BUILDING: Counter[Generation] = Counter()
"""Files a build is writing now (a temp file, renamed into place when done)."""
_KEPT: list[sqlite3.Connection] = []
"""Inherited connections that were in a transaction at the fork (see :func:`_never_closed`)."""
_REFUSED: set[Generation] = set()
"""Files this process was forked while its parent (or an earlier ancestor) was using."""
_IDLE: dict[Generation, list[sqlite3.Connection]] = {}
"""Inherited connections that were idle at the fork, by file: closed before this process opens it."""
_FORKED = False
"""Whether this process was forked from one that had imported this module."""
_CLEARED: set[Generation] = set()
"""Files this process found no inherited descriptor of (see :func:`_held_elsewhere`) and opened."""


def track(conn: sqlite3.Connection, generation: Generation) -> None:
    """Remember which file ``conn`` has open (a connection never moves to another file)."""
    _OPEN[conn] = generation


@contextlib.contextmanager
def building(generation: Generation) -> Iterator[None]:
    """A build's connection is using ``generation`` for the duration."""
    _BUILDING[generation] += 1
    try:
        yield
    finally:
        _BUILDING[generation] -= 1
        if _BUILDING[generation] <= 0:
            del _BUILDING[generation]


def in_use_at_fork(generation: Generation | None) -> None:
    """In a child, right after the fork: a thread of the parent was using ``generation``."""
    if generation is not None:
        _REFUSED.add(generation)


def refuses(generation: Generation) -> bool:
    """Whether this process must not open the index file ``generation`` through SQLite."""
    return generation in _REFUSED


def may_open(generation: Generation) -> bool:
    """:func:`refuses`' opposite, with the connections this process inherited idle closed first.

    Kept until then (never collected at some later moment): closed, SQLite's record of their
    file empties, and the connection about to open takes its own locks at the kernel.  Those
    to other files go too (one replaced at the path would stay allocated for this process's
    life).  A refused file's are never touched: a thread of the parent may have been inside one.
    """
    if generation in _REFUSED:
        return False
    # Two threads of this process may get here at once: each file's list is taken by one of them.
    for held in [held for held in list(_IDLE) if held not in _REFUSED]:
        for conn in _IDLE.pop(held, ()):
            try:
                conn.close()
            except sqlite3.Error:  # its locks stay in the record
                _REFUSED.add(held)
    if generation in _REFUSED:
        return False
    if _FORKED and generation not in _CLEARED:
        if _held_elsewhere(generation):
            return False
        _CLEARED.add(generation)
    return True


def _held_elsewhere(generation: Generation) -> bool:
    """Whether a descriptor of ``generation`` is open in this process before it first opens it.

    One is another library's or the user's own connection inherited from the parent (a plain
    ``sqlite3.connect``): it is in SQLite's record of the file, which this module cannot empty,
    so a connection opened beside it would take no lock at the kernel.  Asked once per file,
    only in a forked child; a descriptor the child opened itself is refused too (a scan is exact).
    """
    try:
        names = os.listdir("/dev/fd")
    except OSError:
        return True
    for name in names:
        try:
            st = os.fstat(int(name))
        except (OSError, ValueError):
            continue
        if (st.st_dev, st.st_ino) == generation:
            return True
    return False


def _never_closed(conn: sqlite3.Connection) -> None:
    """Keep ``conn`` alive for the child's whole life, its exit included.

    CPython closes a connection when its last reference goes (a handle forgets the one
    it inherited; module globals are cleared at exit), and closing one inside a write
    transaction rolls it back: that rewinds the ``-shm`` hash tables every process of the
    index shares, under a writer (the parent, or another process by then) still using them.
    One reference is taken that nothing ever drops.
    """
    try:
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))
    except (ImportError, AttributeError):  # no ctypes here: kept until the exit at least
        _KEPT.append(conn)


def _after_fork_in_child() -> None:
    global _FORKED
    _FORKED = True
    _CLEARED.clear()
    for conn, generation in list(_OPEN.items()):
        try:
            busy = conn.in_transaction  # reads SQLite's autocommit flag only: no lock, no I/O
        except sqlite3.Error:
            continue  # closed
        if busy:
            _REFUSED.add(generation)
            _never_closed(conn)
        else:
            _IDLE.setdefault(generation, []).append(conn)
    _REFUSED.update(_BUILDING)


os.register_at_fork(after_in_child=_after_fork_in_child)

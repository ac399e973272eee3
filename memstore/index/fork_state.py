"""Index files a forked child must not open through SQLite: its parent was using them at the fork.

SQLite's unix VFS keeps one record per process of each open database inode and of its
``-shm`` locks, shared by every connection of the process to that inode, and asks the
kernel for a lock only when no connection of the process holds it already.  POSIX
record locks are not inherited across ``fork()``; that record is, with the parent's
connections in it, and they never leave it: a connection inherited across fork is never
used or closed in the child (its rollback would edit the ``-shm`` the parent still uses).

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
Connections idle at the fork hold only what every open connection holds for its life
(shared locks the parent keeps at the kernel while it runs); a child still uses such a file.
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
    for conn, generation in list(_OPEN.items()):
        try:
            busy = conn.in_transaction  # reads SQLite's autocommit flag only: no lock, no I/O
        except sqlite3.Error:
            continue  # closed
        if busy:
            _REFUSED.add(generation)
            _never_closed(conn)
    _REFUSED.update(_BUILDING)


os.register_at_fork(after_in_child=_after_fork_in_child)

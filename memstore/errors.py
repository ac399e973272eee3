"""The one exception root of memstore.

Every error memstore raises derives from :class:`MemstoreError`.  Where the spec
names a built-in exception (``ValueError``, ``RuntimeError``, ``FileNotFoundError``)
the memstore error also derives from it, so callers written against the spec keep
working while new callers can catch the single root.
"""

from __future__ import annotations


class MemstoreError(Exception):
    """Root of every error raised by memstore."""


class ReadonlyError(MemstoreError, RuntimeError):
    """A mutating operation was called on a readonly store."""


class EmptyContentError(MemstoreError, ValueError):
    """Memory content was empty after stripping."""


class InvalidArgumentError(MemstoreError, ValueError):
    """An argument had an acceptable type but an unacceptable value."""


class ArgumentTypeError(MemstoreError, TypeError):
    """An argument had the wrong type."""


class EntryNotFoundError(MemstoreError, FileNotFoundError):
    """The requested memory entry or card does not exist."""


class StorageError(MemstoreError, OSError):
    """Reading or durably writing a canonical file failed; nothing was acknowledged."""


class NotRegularFileError(StorageError):
    """A canonical file's path holds a symbolic link, a directory or another non-regular file.

    memstore neither follows such a link nor replaces it: the data behind it is not
    the store's, and a rewrite would silently fork it into a private copy.
    """


class LockError(StorageError):
    """The cross-process lock could not be taken (or was used across a fork)."""


class IndexUnavailableError(MemstoreError):
    """The derived index cannot be opened or refreshed; callers fall back to a scan."""


class IndexMigrationPendingError(IndexUnavailableError):
    """A read-only handle found the index at an older schema: healthy, and migrated by the next writable open."""


class IndexUrlError(InvalidArgumentError):
    """An index URL (``--index-url``, ``MEMSTORE_INDEX_URL``) that memstore cannot use.

    Only PostgreSQL through psycopg 3 is supported; the message never holds a password.
    """


class IndexServerError(IndexUnavailableError):
    """The PostgreSQL index server is down, unreachable or too slow to answer.

    The message is one line and names the URL without its password.
    """


class IndexAuthError(IndexServerError):
    """The server answered but refused this role: bad password, unknown role or database, no CONNECT."""


class IndexExtensionError(IndexServerError):
    """The server lacks what the index needs (``pg_trgm``, a recent enough PostgreSQL)."""


def describe(exc: BaseException) -> str:
    """An exception as one line for a person or a model: never a traceback, never several lines.

    OS errors read as their reason and file; a missing optional part of memstore says so;
    anything else is its message.
    """
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename is not None and str(exc.filename) not in text:
            text = f"{text}: {exc.filename}"
    elif isinstance(exc, ImportError):
        text = f"this command needs a part of memstore that is not available ({exc})"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split()) or "unknown error"


class AmbiguousIdError(InvalidArgumentError):
    """An id prefix matches more than one entry or card; ``candidates`` holds (some of) them."""

    def __init__(self, message: str, candidates: tuple[str, ...]) -> None:
        super().__init__(message)
        self.candidates = candidates

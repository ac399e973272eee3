"""The hash functions the read path needs, without loading OpenSSL for a search that hashes nothing.

``import hashlib`` loads OpenSSL's ``_hashlib`` at once (about 3 ms of a fresh process), yet a
search of a current index needs only BLAKE2b (the trust checks), which hashlib itself takes from
CPython's built-in ``_blake2`` module.  SHA-256 is needed only to digest file bytes (a catch-up, a
rewrite), so hashlib is imported on the first such digest.  The digests are hashlib's own.
"""

from __future__ import annotations

from typing import Any

try:  # CPython's built-in BLAKE2: the very constructor hashlib.blake2b is
    from _blake2 import blake2b as blake2b
except ImportError:  # pragma: no cover - another Python without the private module
    from hashlib import blake2b as blake2b

__all__ = ["blake2b", "sha256"]


def sha256(data: bytes = b"") -> Any:
    """``hashlib.sha256(data)``, importing hashlib only when bytes are first digested."""
    import hashlib

    return hashlib.sha256(data)

"""External edits between queries: the next indexed answer equals a scan, exactly.

A seeded random walk edits memory.jsonl the ways git, editors and people do —
checkouts that swap the inode, truncations (also mid-line), same-size in-place
edits near the head, the tail and in the middle of a large file, truncate-then-
regrow to the same size, deletes and re-creations, external appends (torn and
corrupt ones too) — mixed with memstore's own adds and rewrites.  After every edit
the indexed catalog (a long-lived object, and now and then a new one) must answer
list, search and show exactly as ``MemoryCatalog(root, use_index=False)``.

tests/test_index_differential.py covers small files with nasty characters; this
file goes for volume and position (full: ``MEMSTORE_STRESS=full``, 500 edits).

The tests at the end pin down edits that fingerprints of the head and tail alone
would miss (a grown file whose middle was rewritten, a same-size edit that restores
mtime); ctime and the sampled body fingerprint catch them.  The random walk keeps
one clock tick between an edit and the previous state of the file so that it tests
the detected classes strictly.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import reliability_workers as workers

from memstore.catalog import MemoryCatalog

WORDS = ["alpha", "bravo", "delta", "gamma", "omega", "sigma", "tango", "zulus"]
STAMPS = ["2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00", "2025-12-31T23:59:59+00:00"]


def _line(rng: random.Random, n: int) -> bytes:
    payload = {
        "memory_id": f"id{rng.randint(0, 400)}",
        "content": f"u{n} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40))),
        "tags": rng.sample(["auto-curated", "run-summary", "alpha", "misc"], rng.randint(0, 2)),
        "created_at": rng.choice(STAMPS),
        "branch_name": rng.choice([None, "b1", "b2"]),
        "run_id": rng.choice([None, "r1"]),
    }
    return json.dumps(payload, sort_keys=True).encode()


class Walk:
    """The random walk's state: a path, an rng and a counter for unique words."""

    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.catalog = MemoryCatalog(root)
        self.path = self.catalog.path
        self.n = 0

    def lines(self, count: int) -> list[bytes]:
        self.n += count
        return [_line(self.rng, self.n + k) for k in range(count)]

    def data(self) -> bytes:
        return self.path.read_bytes() if self.path.exists() else b""

    # -- edits -------------------------------------------------------------------------

    def checkout(self) -> None:
        """git checkout: a different version written beside the file and renamed over it."""
        old = [line for line in self.data().split(b"\n") if line]
        self.rng.shuffle(old) if self.rng.random() < 0.2 else None
        keep = old[: self.rng.randint(0, len(old))] if old and self.rng.random() < 0.5 else old
        new = keep + self.lines(self.rng.randint(0, 60))
        tmp = self.path.with_name("checkout.tmp~")
        tmp.write_bytes(b"".join(line + b"\n" for line in new))
        os.replace(tmp, self.path)

    def truncate(self) -> None:
        data = self.data()
        if data:
            with open(self.path, "r+b") as handle:
                handle.truncate(self.rng.randint(0, len(data) - 1))

    def same_size_edit(self) -> None:
        """Swap one word for another of the same length, near the head, the tail or in the middle."""
        data = self.data()
        spots = [m for m in range(len(data)) if data[m : m + 5] in {w.encode() for w in WORDS}]
        if not spots:
            return
        region = self.rng.choice(["head", "tail", "middle"])
        if region == "head":
            choices = [m for m in spots if m < 4096] or spots
        elif region == "tail":
            choices = [m for m in spots if m > len(data) - 4096] or spots
        else:
            choices = [m for m in spots if 4096 <= m <= len(data) - 4096] or spots
        spot = self.rng.choice(choices)
        with open(self.path, "r+b") as handle:
            handle.seek(spot)
            handle.write(self.rng.choice(WORDS).encode())

    def truncate_and_regrow(self) -> None:
        """Truncate, then write different bytes back up to exactly the old size."""
        data = self.data()
        if len(data) < 10:
            return
        cut = self.rng.randint(0, len(data) - 1)
        fresh = b"".join(line + b"\n" for line in self.lines(60))
        regrow = (fresh * (1 + (len(data) - cut) // max(1, len(fresh))))[: len(data) - cut]
        with open(self.path, "r+b") as handle:
            handle.truncate(cut)
            handle.seek(cut)
            handle.write(regrow)

    def delete(self) -> None:
        if self.path.exists():
            self.path.unlink()

    def recreate(self) -> None:
        self.delete()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(b"".join(line + b"\n" for line in self.lines(self.rng.randint(0, 40))))

    def append(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        extra = [*self.lines(self.rng.randint(1, 5))]
        if self.rng.random() < 0.3:
            extra.append(self.rng.choice([b"}{", b"\xff\xfe", b"", b"   ", b'{"memory_id": "x"']))
        blob = b"\n".join(extra)
        if self.rng.random() < 0.7:
            blob += b"\n"
        with open(self.path, "ab") as handle:
            handle.write(blob)

    def api_add(self) -> None:
        self.catalog.add(" ".join(self.rng.choice(WORDS) for _ in range(5)), branch_name="b1")

    def api_rewrite(self) -> None:
        self.catalog.delete_by_branch(self.rng.choice(["b1", "b2"]))

    def reopen(self) -> None:
        self.catalog = MemoryCatalog(self.root)

    # -- the check ---------------------------------------------------------------------

    def check(self) -> None:
        scan = MemoryCatalog(self.root, use_index=False, readonly=True)
        assert self.catalog.list(limit=10**6) == scan.list(limit=10**6)
        for query in [*self.rng.sample(WORDS, 3), "alpha bravo", f"u{self.rng.randint(0, self.n)}", "auto"]:
            assert self.catalog.search(query, limit=5) == scan.search(query, limit=5), query
        ids = [entry.memory_id for entry in scan.list(limit=10**6)]
        for memory_id in self.rng.sample(ids, min(3, len(ids))):
            assert self.catalog.show(memory_id) == scan.show(memory_id)


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _next_tick(path: Path, before: tuple[int, int, int] | None) -> None:
    """If an in-place edit left inode, size and mtime as they were (same clock tick), let time pass."""
    while before is not None and _stat(path) == before:
        time.sleep(0.002)
        os.utime(path)


DETECTED: dict[str, Callable[[Walk], None]] = {
    "checkout": Walk.checkout,
    "truncate": Walk.truncate,
    "same_size_edit": Walk.same_size_edit,
    "truncate_and_regrow": Walk.truncate_and_regrow,
    "delete": Walk.delete,
    "recreate": Walk.recreate,
    "append": Walk.append,
    "api_add": Walk.api_add,
    "api_rewrite": Walk.api_rewrite,
    "reopen": Walk.reopen,
}


@pytest.mark.stress
@pytest.mark.parametrize("seed", [1, 2])
def test_random_external_edits_then_the_next_query_is_exact(tmp_path: Path, seed: int) -> None:
    edits = workers.sized(60, 500) // 2
    walk = Walk(tmp_path, seed)
    walk.recreate()
    walk.path.write_bytes(b"".join(line + b"\n" for line in walk.lines(300)))  # ~60 KiB to start with
    walk.check()
    done: dict[str, int] = {}
    for _ in range(edits):
        name = walk.rng.choice(sorted(DETECTED))
        before = _stat(walk.path)
        DETECTED[name](walk)
        _next_tick(walk.path, before)
        done[name] = done.get(name, 0) + 1
        walk.check()
    assert MemoryCatalog(tmp_path).check_index().equal
    workers.figure("external-edits", seed=seed, edits=edits, **done)


# ----------------------------------------------------------------------------- known blind spots


def _big_catalog(root: Path) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    for n in range(300):
        catalog.add(f"entry number {n:04d} alpha", tags=["t"])
    return catalog


def _edit_middle(path: Path, *, grow: bool) -> None:
    data = bytearray(path.read_bytes())
    spot = data.find(b"entry number 0150")
    data[spot : spot + 17] = b"entry number 9999"
    if grow:
        data += (
            json.dumps({"memory_id": "new", "content": "appended", "created_at": "2026-01-01T00:00:00+00:00"}).encode()
            + b"\n"
        )
    with open(path, "r+b") as handle:  # an editor saving in place: same inode
        handle.write(data)


def test_in_place_save_that_changes_the_middle_and_grows(tmp_path: Path) -> None:
    catalog = _big_catalog(tmp_path)
    assert catalog.search("0150")
    _edit_middle(catalog.path, grow=True)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert [e.content for e in scan.search("9999")] == ["entry number 9999 alpha"]
    assert catalog.search("9999") == scan.search("9999")


def test_same_size_middle_edit_within_one_mtime_tick(tmp_path: Path) -> None:
    catalog = _big_catalog(tmp_path)
    st = os.stat(catalog.path)
    assert catalog.search("0150")
    _edit_middle(catalog.path, grow=False)
    os.utime(catalog.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert catalog.search("9999") == scan.search("9999")


def test_check_index_notices_stale_search_text(tmp_path: Path) -> None:
    catalog = _big_catalog(tmp_path)
    st = os.stat(catalog.path)
    assert catalog.search("0150")
    _edit_middle(catalog.path, grow=False)
    os.utime(catalog.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    stale = catalog.search("9999") != scan.search("9999")
    assert not (stale and catalog.check_index().equal)

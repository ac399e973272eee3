"""The index follows a rewrite without reading the new file back when its stat says nobody touched it.

The rewrite digests the bytes it writes; right after the rename it records the file's
stat.  The follow-up takes that digest (checked at sampled blocks) only while the file
still has that device, inode, size, mtime and ctime, and otherwise reads the file whole.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstore import files
from memstore.block_digest import BLOCK_BYTES, PrefixDigest
from memstore.catalog import MemoryCatalog
from memstore.index import catalog_index, source
from memstore.index.catalog_index import CatalogIndex, RewritePlan
from memstore.jsonl import encode_entries
from memstore.kept_copy import KeptCopy


def _needs_fine_ctime(folder: Path, pin: pytest.MonkeyPatch | None = None) -> None:
    """The shortcut is taken only where a change right after a stat always moves ctime.

    With ``pin``, the rewrite's own probe then gives this verdict too: on a loaded machine a
    preempted probe declines the shortcut (the follow-up reads the file back: exact, but not
    the path these tests force)."""
    fd = os.open(folder / "ctime-probe", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if not files.ctime_moves_at_once(fd):
            pytest.skip("this file system's ctime is coarse: rewrites are always read back here")
    finally:
        os.close(fd)
        os.unlink(folder / "ctime-probe")
    if pin is not None:
        pin.setattr(files, "ctime_moves_at_once", lambda fd: True)


def _scan(root: Path) -> MemoryCatalog:
    return MemoryCatalog(root, use_index=False, readonly=True)


def _seed(root: Path, count: int, *, filler: int = 2000, gone_every: int = 7, first_gone: int = 3) -> MemoryCatalog:
    """``count`` entries of about ``filler`` bytes, every ``gone_every``-th from ``first_gone`` on branch "gone"."""
    catalog = MemoryCatalog(root)
    catalog.add("first note", branch_name="kept")
    branches = ["gone" if n >= first_gone and n % gone_every == 0 else "kept" for n in range(count)]
    entries = [catalog._new_entry(f"note {n} word{n % 5} {'x' * filler}", (), branches[n], None) for n in range(count)]
    with open(catalog.path, "ab") as handle:
        handle.write(encode_entries(entries))
    assert catalog.search("note", limit=1)  # built
    return catalog


class _Follow:
    """Records each follow-up: the plan, whether the shortcut was taken, and the bytes the proof digested."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.plans: list[RewritePlan] = []
        self.followed: list[bool] = []
        self.taken: list[bool] = []
        self.read = 0
        self._monkeypatch = monkeypatch
        real_apply, real_prefix, real_extend = CatalogIndex.apply_rewrite, source.rewritten_prefix, PrefixDigest.extend

        def apply_rewrite(index: CatalogIndex, plan: RewritePlan, after: os.stat_result, **held: Any) -> bool:
            self.plans.append(plan)
            self.read = 0
            self.followed.append(real_apply(index, plan, after, **held))
            return self.followed[-1]

        def rewritten_prefix(*args: object, **kwargs: object) -> PrefixDigest | None:
            prefix = real_prefix(*args, **kwargs)  # type: ignore[arg-type]
            self.taken.append(prefix is not None)
            return prefix

        def extend(digest: PrefixDigest, fd: int, end: int, *, direct: bool = False) -> None:
            start = digest.end
            real_extend(digest, fd, end, direct=direct)
            self.read += digest.end - start

        monkeypatch.setattr(CatalogIndex, "apply_rewrite", apply_rewrite)
        monkeypatch.setattr(catalog_index, "rewritten_prefix", rewritten_prefix)
        monkeypatch.setattr(PrefixDigest, "extend", extend)


def _recorded(catalog: MemoryCatalog) -> source.SourceState:
    with sqlite3.connect(catalog.index_path) as conn:
        state = source.SourceState.load(conn, catalog_index.SOURCE_NAME)
    assert state is not None
    return state


def _answers_as_a_scan(root: Path, catalog: MemoryCatalog) -> None:
    scan = _scan(root)
    for query in ("note", "word3", "word0 note", "first"):
        assert catalog.search(query, limit=10_000) == scan.search(query, limit=10_000), query
    assert catalog.check_index().equal


def test_an_untouched_rewritten_file_is_not_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """About 20 MB written: the follow-up reads the sampled blocks and the partial one, not the file,
    records the rewrite's own digest (equal to a read-back) and counts one chained catch-up."""
    _needs_fine_ctime(tmp_path, monkeypatch)
    catalog = _seed(tmp_path, 10_000)
    resumes = _recorded(catalog).resumes
    follow = _Follow(monkeypatch)
    assert catalog.delete_by_branch("gone") == len(range(7, 10_000, 7))
    size = catalog.path.stat().st_size
    assert size > 16 * BLOCK_BYTES
    assert follow.followed == [True] and follow.taken == [True]
    assert follow.read <= (source.REWRITE_SAMPLES + 1) * BLOCK_BYTES < size
    with open(catalog.path, "rb") as handle:
        on_disk = PrefixDigest.of(handle.fileno(), size).pack()
    assert follow.plans[0].written == on_disk
    assert _recorded(catalog).resumes == resumes + 1
    monkeypatch.undo()
    _answers_as_a_scan(tmp_path, catalog)


def test_the_shortcut_counts_toward_the_periodic_full_proof(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the full proof is due (FULL_PROOF_EVERY), the follow-up reads the whole file and starts the count again."""
    catalog = _seed(tmp_path, 1500)
    monkeypatch.setattr(source, "FULL_PROOF_EVERY", 1)
    follow = _Follow(monkeypatch)
    assert catalog.delete_by_branch("gone")
    assert follow.followed == [True] and follow.taken == [False]
    assert follow.read == catalog.path.stat().st_size
    assert _recorded(catalog).resumes == 0
    monkeypatch.undo()
    _answers_as_a_scan(tmp_path, catalog)


def _edit_before_follow(monkeypatch: pytest.MonkeyPatch, edit: object) -> None:
    real = CatalogIndex.apply_rewrite

    def apply_rewrite(index: CatalogIndex, plan: RewritePlan, after: os.stat_result, **held: Any) -> bool:
        edit(index.source_path)  # type: ignore[operator]
        return real(index, plan, after, **held)

    monkeypatch.setattr(CatalogIndex, "apply_rewrite", apply_rewrite)


def _same_size_edit_keeping_mtime(path: Path) -> None:
    """Another tool saves a same-length edit in place and sets mtime back (``rsync --inplace -t``):
    only ctime tells."""
    before = path.stat()
    data = path.read_bytes()
    at = data.find(b"note 701 word1")
    whole = len(data) // BLOCK_BYTES
    sampled = {(whole - 1) * i // (source.REWRITE_SAMPLES - 1) for i in range(source.REWRITE_SAMPLES)}
    assert at // BLOCK_BYTES not in sampled, "the edit must lie where only ctime can tell"
    with open(path, "r+b") as handle:
        handle.write(data.replace(b"note 701 word1", b"note 701 wordZ"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _attribute_change(path: Path) -> None:
    os.chmod(path, path.stat().st_mode & 0o777)  # the same mode: no byte, size or mtime changes, ctime does


def _append(path: Path) -> None:
    with open(path, "ab") as handle:
        handle.write(b"\n")


def _replace_with_copy(path: Path) -> None:
    """The same bytes and times under a new inode."""
    copy = path.with_name("copy.jsonl")
    shutil.copy2(path, copy)
    os.replace(copy, path)


@pytest.mark.parametrize(
    "edit",
    [_same_size_edit_keeping_mtime, _attribute_change, _append, _replace_with_copy],
    ids=["ctime_same_size_edit", "ctime_attributes", "size", "inode"],
)
def test_a_file_touched_after_the_rename_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit: object
) -> None:
    """Whatever changed the file between the rename and the follow-up, the shortcut is refused and
    the index ends up answering what a scan answers (the edit is never lost)."""
    catalog = _seed(tmp_path, 10_000)
    follow = _Follow(monkeypatch)
    _edit_before_follow(monkeypatch, edit)
    assert catalog.delete_by_branch("gone") == len(range(7, 10_000, 7))
    assert follow.taken in ([], [False])  # a new inode or a shorter index state is refused before the shortcut
    monkeypatch.undo()
    _answers_as_a_scan(tmp_path, catalog)
    if edit is _same_size_edit_keeping_mtime:
        assert [entry.content.split()[:3] for entry in catalog.search("wordZ")] == [["note", "701", "wordZ"]]


def test_a_sampled_block_that_differs_refuses_the_digest(tmp_path: Path) -> None:
    """The stat is as recorded but a sampled block (or the partial one) does not hold what the digest
    says: no shortcut.  A block between the samples is not read (the residual the ctime rule covers)."""
    path = tmp_path / "f"
    data = bytearray(os.urandom(10 * BLOCK_BYTES + 1234))
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    try:
        written = PrefixDigest.of(fd, len(data)).pack()
        st = os.fstat(fd)
        assert source.rewritten_prefix(written, fd, st, renamed=st, resumes=0) is not None
        picks = {9 * i // (source.REWRITE_SAMPLES - 1) for i in range(source.REWRITE_SAMPLES)}
        skipped = min(set(range(10)) - picks)
        for block, expected in [(0, None), (9, None), (10, None), (skipped, "taken")]:
            at = block * BLOCK_BYTES + 17
            os.pwrite(fd, bytes([data[at] ^ 1]), at)
            found = source.rewritten_prefix(written, fd, st, renamed=st, resumes=0)
            assert (found is not None) == (expected == "taken"), block
            os.pwrite(fd, bytes([data[at]]), at)
        assert source.rewritten_prefix(written, fd, st, renamed=None, resumes=0) is None
    finally:
        os.close(fd)


@pytest.mark.parametrize("moved", ["mtime", "nothing"])
def test_a_file_changed_between_its_last_write_and_the_rename_gives_no_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moved: str
) -> None:
    """Only ctime may differ between the stat after the last write and the one after the rename:
    an mtime set back by another tool right after the rename leaves no identity to vouch with."""
    _needs_fine_ctime(tmp_path, monkeypatch)
    path = tmp_path / "f"
    path.write_bytes(b"old\n")
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        real_replace(src, dst)
        if moved == "mtime":
            st = os.stat(dst)
            os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns + 1))

    monkeypatch.setattr(files.os, "replace", replace)
    with files.Replacement(path, digest=True) as replacement:
        replacement.write(b"new\n")
        written = replacement.commit()
    assert path.read_bytes() == b"new\n"
    if moved == "mtime":
        assert replacement.renamed is None
    else:
        assert replacement.renamed is not None
        assert (replacement.renamed.st_ino, replacement.renamed.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


def test_a_replacement_without_a_digest_neither_probes_nor_tracks_its_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pinned.json, failures.json and MEMORY.md are replaced through atomic_write: no index vouches for
    them by stat, so they pay no ctime probe (two chmods) and no fstat after each write."""

    def refuse(fd: int) -> bool:
        raise AssertionError("probed")

    monkeypatch.setattr(files, "ctime_moves_at_once", refuse)
    path = tmp_path / "pinned.json"
    path.write_bytes(b"{}")
    fstats: list[int] = []
    real_fstat = os.fstat

    def counting(fd: int) -> os.stat_result:
        fstats.append(fd)
        return real_fstat(fd)

    monkeypatch.setattr(files.os, "fstat", counting)
    with files.Replacement(path) as replacement:
        for _ in range(5):
            replacement.write(b"x" * 10)
        replacement.commit()
        assert replacement.renamed is None
    monkeypatch.undo()
    assert path.read_bytes() == b"x" * 50
    assert len(fstats) <= 2, fstats  # the create's identity check and the stat commit returns


def test_the_digest_is_of_the_bytes_written_not_of_what_the_scan_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tool edits the old file in place after the scan read its first block and before the
    copy re-reads it (the first dropped line lies past it).  The new file holds the edited bytes;
    the digest the follow-up trusts must be theirs, or the index would vouch for bytes it never
    saw.  The rewrite is redone under the lock, and the shortcut's digest equals a read-back."""
    _needs_fine_ctime(tmp_path, monkeypatch)
    catalog = _seed(tmp_path, 6000, first_gone=5000)
    real_open = KeptCopy._open_at
    edited: list[int] = []

    def open_at(copy: KeptCopy, at: int) -> None:
        if not edited:
            edited.append(at)
            data = catalog.path.read_bytes()
            with open(catalog.path, "r+b") as handle:
                handle.write(data.replace(b"note 2 word2", b"note 2 wordZ", 1))
        real_open(copy, at)

    monkeypatch.setattr(KeptCopy, "_open_at", open_at)
    follow = _Follow(monkeypatch)
    assert catalog.delete_by_branch("gone") == len(range(5005, 6000, 7))
    assert edited and edited[0] > 0
    assert follow.followed == [True] and follow.taken == [True]
    size = catalog.path.stat().st_size
    with open(catalog.path, "rb") as handle:
        assert follow.plans[0].written == PrefixDigest.of(handle.fileno(), size).pack()
    monkeypatch.undo()
    _answers_as_a_scan(tmp_path, catalog)
    assert len(catalog.search("wordZ")) == 1


@settings(max_examples=20, deadline=None)
@given(
    layout=st.lists(st.sampled_from(["keep", "gone", "blank", "long"]), min_size=1, max_size=30),
)
def test_followed_rewrites_answer_as_a_scan(tmp_path_factory: pytest.TempPathFactory, layout: list[str]) -> None:
    """Any mix of kept, removed, blank and long (over a block) lines: the digest the follow-up
    takes equals a read-back of the new file, and the index answers what a scan answers."""
    root = tmp_path_factory.mktemp("skip")
    _needs_fine_ctime(root)
    catalog = MemoryCatalog(root)
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, kind in enumerate(layout):
        if kind == "blank":
            lines.append(b"")
            continue
        pad = "y" * (BLOCK_BYTES + 100) if kind == "long" else ""
        entry = catalog._new_entry(f"note {i} word{i % 5} {pad}", (), "gone" if kind == "gone" else "kept", None)
        lines.append(encode_entries([entry]).rstrip(b"\n"))
    catalog.path.write_bytes(b"".join(line + b"\n" for line in lines))
    assert catalog.search("note", limit=1) is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "ctime_moves_at_once", lambda fd: True)  # fine here (checked above)
        follow = _Follow(patch)
        removed = catalog.delete_by_branch("gone")
    assert removed == layout.count("gone")
    if removed:
        assert follow.followed == [True] and follow.taken == [True]
        size = catalog.path.stat().st_size
        with open(catalog.path, "rb") as handle:
            assert follow.plans[0].written == PrefixDigest.of(handle.fileno(), size).pack()
    _answers_as_a_scan(root, catalog)


def test_coarse_timestamps_give_no_shortcut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a change within one clock tick leaves ctime as it was (ext4 before Linux 6.13, ext2),
    an edit right after the rename would be invisible to the stat: the rewrite records no
    identity and the follow-up reads the new file whole."""
    catalog = _seed(tmp_path, 10_000)
    monkeypatch.setattr(files, "ctime_moves_at_once", lambda fd: False)
    follow = _Follow(monkeypatch)
    assert catalog.delete_by_branch("gone") == len(range(7, 10_000, 7))
    assert follow.plans[0].renamed is None
    assert follow.followed == [True] and follow.taken == [False]
    assert follow.read == catalog.path.stat().st_size
    monkeypatch.undo()
    _answers_as_a_scan(tmp_path, catalog)


def test_the_ctime_probe_tells_a_ctime_that_does_not_move(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe changes nothing but the ctime; when the change does not move it, it says so."""
    path = tmp_path / "probe"
    path.write_bytes(b"x")
    os.chmod(path, 0o640)
    fd = os.open(path, os.O_RDONLY)
    try:
        moves = files.ctime_moves_at_once(fd)
        assert os.stat(path).st_mode & 0o7777 == 0o640 and path.read_bytes() == b"x"
        monkeypatch.setattr(files.os, "fchmod", lambda fd, mode: None)
        assert files.ctime_moves_at_once(fd) is False
    finally:
        os.close(fd)
    assert isinstance(moves, bool)


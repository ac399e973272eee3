"""Review 26b: quarantine records read before a move (quarantine_records.py), doctor's second
records of one move, a child forked while its parent used the index (fork_state.py), and the
torn-tail cut that lowers the sync record before its last check (group_commit._truncate).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from memstore import jsonl
from memstore.catalog import MemoryCatalog
from memstore.doctor import diagnose, repair
from memstore.jsonl import decode_entry, encode_entries, encode_entry
from memstore.models import MemoryEntry
from tests.test_quarantine_records import _keys
from tests.test_rewrite_held_follow import _seed


def _store(root: Path, lines: list[bytes]) -> MemoryCatalog:
    catalog = MemoryCatalog(root)
    catalog.path.parent.mkdir(parents=True, exist_ok=True)
    catalog.path.write_bytes(b"".join(lines))
    return catalog


def _child_adds_after_go(root: Path, catalog: MemoryCatalog, ready: Path, go: Path, out: Path) -> None:
    """The child: answers once, says it is ready, waits for go, then adds and answers again."""
    signal.alarm(60)
    result: dict[str, object] = {}
    try:
        scan = MemoryCatalog(root, use_index=False, readonly=True)
        result["before"] = catalog.search("word3", limit=10_000) == scan.search("word3", limit=10_000)
        ready.write_text("1")
        while not go.exists():
            time.sleep(0.01)
        for n in range(5):
            catalog.add(f"from the child word3 {n}", branch_name="child")
        result["after"] = catalog.search("word3", limit=10_000) == scan.search("word3", limit=10_000)
    except BaseException as exc:
        result["error"] = repr(exc)
    finally:
        out.write_text(json.dumps(result))
        os._exit(0)


# ------------------------------------------------------------------ the prefilter


def test_a_record_whose_key_is_escaped_next_to_a_nested_memory_id_counts(tmp_path: Path) -> None:
    """The record's own ``memory_id`` key is spelled with an escape, and its provenance (an object
    nested in the line) has a plain ``memory_id`` key: the line was passed over as naming another
    id, so a quarantine tried again recorded the entry a second time."""
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note one word1", ("t",), "gone", None)
    catalog = _store(tmp_path, [encode_entry(entry)])
    record = {**entry.to_dict(), "quarantine": True, "provenance": {"memory_id": "another", "reason": "r"}}
    own = '"memory_id": "' + entry.memory_id
    line = json.dumps(record, sort_keys=True).replace(own, own.replace("memory_id", "memory\\u005fid"))
    assert line.count("memory_id") == 1  # only the nested key is spelled plainly
    catalog.quarantine_path.write_bytes(line.encode() + b"\n")
    assert catalog.list_quarantined(limit=10) == [entry]  # every reader reads the record

    assert catalog.quarantine_by_branch("gone", "again") == 1
    assert _keys(catalog.quarantine_path) == Counter({encode_entry(entry): 1})
    assert catalog.list(limit=10) == []


def test_a_record_after_a_key_that_only_ends_in_memory_id_counts(tmp_path: Path) -> None:
    """A key ``x"memory_id`` (its quote escaped) looks like a plain ``memory_id`` key to the
    prefilter; the line's own key, spelled with an escape, was then never looked at."""
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note two word2", (), "gone", None)
    catalog = _store(tmp_path, [encode_entry(entry)])
    fields = json.dumps(entry.to_dict(), sort_keys=True)[1:].replace('"memory_id"', '"memory\\u005fid"')
    line = '{"x\\"memory_id": "someone", ' + fields
    assert decode_entry(line.encode()) == entry
    catalog.quarantine_path.write_bytes(line.encode() + b"\n")

    assert catalog.quarantine_by_branch("gone", "again") == 1
    assert _keys(catalog.quarantine_path) == Counter({encode_entry(entry): 1})


def _spelled(text: str, escaped: list[bool], upper: bool) -> str:
    """``text`` with the letters ``escaped`` picks spelled as ``\\u`` escapes."""
    out = []
    for char, escape in zip(text, escaped + [False] * len(text), strict=False):
        code = f"\\u{ord(char):04x}"
        out.append((code.upper().replace("\\U", "\\u") if upper else code) if escape else char)
    return "".join(out)


@settings(max_examples=200, deadline=None)
@given(
    key_escapes=st.lists(st.booleans(), max_size=9),
    id_escapes=st.lists(st.booleans(), max_size=4),
    upper=st.booleans(),
    nested=st.sampled_from([None, "plain", "escaped-quote", "duplicate-first", "duplicate-last"]),
    wanted_nested=st.booleans(),
    id_first=st.booleans(),
    before=st.sampled_from([b"", b'{"memory_id": "abc\n', b'{"memory_id":\n', b'{"x": "\\u00\n', b"\xef\xbb\xbf\n"]),
)
def test_the_prefilter_finds_what_readers_read_however_the_key_and_id_are_spelled(
    key_escapes: list[bool],
    id_escapes: list[bool],
    upper: bool,
    nested: str | None,
    wanted_nested: bool,
    id_first: bool,
    before: bytes,
) -> None:
    """``before``: a line ahead of the record (cut short inside an id, after a key, in an escape)."""
    from memstore.quarantine_records import entry_key, recorded_among

    with tempfile.TemporaryDirectory() as tmp:
        catalog = MemoryCatalog(Path(tmp))
        entry = catalog._new_entry("note five word0", ("t",), "gone", None)
        other_id = entry.memory_id if wanted_nested else "someone else"
        fields = {**entry.to_dict(), "memory_id": "@ID@", "quarantine": True}
        body = json.dumps(fields, sort_keys=not id_first)
        own = f'"{_spelled("memory_id", key_escapes, upper)}": "{_spelled(entry.memory_id, id_escapes, upper)}"'
        body = body.replace('"memory_id": "@ID@"', own)
        extra = {
            None: "",
            "plain": f'"provenance": {{"memory_id": "{other_id}"}}, ',
            "escaped-quote": f'"x\\"memory_id": "{other_id}", ',
            "duplicate-first": f'"memory_id": "{other_id}", ',
            "duplicate-last": "",
        }[nested]
        line = "{" + extra + body[1:]
        if nested == "duplicate-last":
            line = line[:-1] + f', "memory_id": "{other_id}"}}'
        catalog.quarantine_path.parent.mkdir(parents=True, exist_ok=True)
        catalog.quarantine_path.write_bytes(before + line.encode() + b"\n")
        read = Counter(encode_entry(found) for found in catalog.list_quarantined(limit=10))
        key = entry_key(entry)
        assert recorded_among(catalog.quarantine_path, [entry]) == ({key: read[key]} if read[key] else {})


def test_a_record_after_a_line_cut_short_inside_an_id_counts(tmp_path: Path) -> None:
    """A line cut short inside its id (a torn write another tool buried) has no closing quote:
    the prefilter's id ran on into the next line, up to its first quote, and the match resumed
    past the quote that opens that line's ``memory_id`` key (first, as ``to_dict`` orders it)."""
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note eight word0", (), "gone", None)
    catalog = _store(tmp_path, [encode_entry(entry)])
    record = json.dumps({**entry.to_dict(), "quarantine": True, "provenance": {"reason": "r"}})
    assert record.startswith('{"memory_id": ')
    catalog.quarantine_path.write_bytes(b'{"memory_id": "abc\n' + record.encode() + b"\n")
    assert catalog.list_quarantined(limit=10) == [entry]

    assert catalog.quarantine_by_branch("gone", "again") == 1
    assert _keys(catalog.quarantine_path) == Counter({encode_entry(entry): 1})


# ------------------------------------------------------------------ doctor


def test_doctor_keeps_a_record_whose_provenance_differs_only_in_a_value_s_type(tmp_path: Path) -> None:
    """``true``, ``1`` and ``1.0`` are equal in Python: two records that say different things
    (a reader shows each as it is) were a "duplicate" doctor --fix dropped."""
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note three word3", (), "gone", None)
    _store(tmp_path, [])
    first = encode_entries([entry], quarantine=True, provenance={"reason": "r", "flag": True, "quarantined_at": "1"})
    second = encode_entries([entry], quarantine=True, provenance={"reason": "r", "flag": 1, "quarantined_at": "2"})
    third = encode_entries([entry], quarantine=True, provenance={"reason": "r", "flag": 1.0, "quarantined_at": "2"})
    catalog.quarantine_path.write_bytes(first + second + third)
    findings = [finding for finding in diagnose(tmp_path).findings if finding.kind == "duplicate-id"]
    assert len(findings) == 2 and not any(finding.fixable for finding in findings)
    repair(tmp_path)
    assert catalog.quarantine_path.read_bytes() == first + second + third


def test_doctor_keeps_records_whose_numbers_differ_beyond_a_double(tmp_path: Path) -> None:
    """orjson reads an integer beyond 64 bits as a float: two tickets became one number."""
    jsonl.load_orjson()  # as in any process past its first lines
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note four word4", (), "gone", None)
    _store(tmp_path, [])
    first = encode_entries([entry], quarantine=True, provenance={"ticket": 2**64, "quarantined_at": "1"})
    second = encode_entries([entry], quarantine=True, provenance={"ticket": 2**64 + 1, "quarantined_at": "1"})
    catalog.quarantine_path.write_bytes(first + second)
    repair(tmp_path)
    assert catalog.quarantine_path.read_bytes() == first + second


def test_doctor_keeps_an_entry_whose_id_is_quarantined_with_other_content(tmp_path: Path) -> None:
    """An entry edited after the copy that was quarantined: the quarantine does not hold it, so
    --fix must not remove it from memory.jsonl (its text was in neither file afterwards)."""
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note six word1", (), "gone", None)
    edited = MemoryEntry(**{**entry.to_dict(), "content": "note six, edited later word1"})
    catalog = _store(tmp_path, [encode_entry(edited)])
    catalog.quarantine_path.write_bytes(encode_entries([entry], quarantine=True, provenance={"reason": "r"}))
    findings = [finding for finding in diagnose(tmp_path).findings if finding.kind == "quarantined-entry"]
    assert len(findings) == 1 and not findings[0].fixable
    repair(tmp_path)
    assert catalog.list(limit=10) == [edited]


def test_doctor_still_removes_an_entry_a_merge_brought_back(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    entry = catalog._new_entry("note seven word2", (), "gone", None)
    catalog = _store(tmp_path, [encode_entry(entry)])
    record = json.dumps({**entry.to_dict(), "provenance": {"reason": "r"}, "quarantine": True}, indent=1)
    catalog.quarantine_path.write_bytes(record.replace("\n", " ").encode() + b"\n")
    findings = [finding for finding in diagnose(tmp_path).findings if finding.kind == "quarantined-entry"]
    assert len(findings) == 1 and findings[0].fixable
    repair(tmp_path)
    assert catalog.list(limit=10) == [] and catalog.list_quarantined(limit=10) == [entry]


# ------------------------------------------------------------------ fork


def _index_integrity(root: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{root / '.teaagent' / 'index' / 'memstore.sqlite3'}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


_OTHER_WRITER = """
import sys
from memstore import jsonl
from memstore.catalog import MemoryCatalog
catalog = MemoryCatalog(sys.argv[1])
for n in range(20):
    catalog.add(f"from another process word3 {n}", branch_name="other")
assert catalog.search("word3", limit=10_000)
"""


def test_a_child_forked_while_idle_does_not_corrupt_the_index_once_its_parent_lets_go(tmp_path: Path) -> None:
    """The child's own connection to a file its parent had open took no lock at the kernel (its
    record of the file still held the parent's): once the parent closed its connection, the next
    process deleted the -wal and -shm the child went on using, and the child's writes, folded
    into the file from its stale view, broke the b-tree every process reads.  (The parent's
    connections stay open in the child until collected: the other handle keeps its own.)"""
    catalog = _seed(tmp_path, 300)
    other = MemoryCatalog(tmp_path)  # a second handle on the same index (an MCP server's, say), idle too
    assert other.search("word3", limit=1)
    ready, go, out = tmp_path / "ready", tmp_path / "go", tmp_path / "child.json"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _child_adds_after_go(tmp_path, catalog, ready, go, out)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for handle in (catalog, other):
            index = handle._index.index()
            assert index is not None
            index.close()  # the parent lets go of the index (as a process that exits does)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        subprocess.run([sys.executable, "-c", _OTHER_WRITER, str(tmp_path)], check=True, env=env, timeout=120)
    finally:
        go.write_text("1")
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and json.loads(out.read_text()) == {"before": True, "after": True}
    assert _index_integrity(tmp_path) == ["ok"]
    fresh = MemoryCatalog(tmp_path)
    assert fresh.check_index().equal
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert fresh.search("word3", limit=10_000) == scan.search("word3", limit=10_000)


def test_a_child_never_closes_a_connection_another_thread_was_inside_at_the_fork(tmp_path: Path) -> None:
    """A statement outside a transaction (a checkpoint after a write, a pragma) holds SQLite's
    mutex of its connection while it runs, and in the child that mutex stays held for ever:
    the idle connections a child closes before it opens a file (so its own takes its locks)
    must never include one of a file refused for a handle another thread was using, or the
    close waits on that mutex and the child hangs (as 383368c's first order of the two did)."""
    import gc
    import threading

    catalog = _seed(tmp_path, 300)
    index = catalog._index.index()
    assert index is not None
    conn = index._connection()
    inside, done = threading.Event(), threading.Event()

    def slow() -> int:
        inside.set()
        done.wait(30)
        return 1

    conn.create_function("slow_statement", 0, slow)
    del conn  # only the handle keeps it

    def run() -> None:
        with index._mutex:
            index._connection().execute("SELECT slow_statement()").fetchall()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert inside.wait(30)
    out = tmp_path / "child.json"
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            signal.alarm(20)
            try:
                scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
                same = catalog.search("word3", limit=10_000) == scan.search("word3", limit=10_000)
                gc.collect()
                out.write_text(json.dumps({"same": same}))
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
    finally:
        done.set()
        thread.join(30)
    assert os.WIFEXITED(status), f"the child was killed by signal {os.WTERMSIG(status)}"
    assert json.loads(out.read_text()) == {"same": True}
    assert catalog.check_index().equal


def test_a_child_keeps_no_index_file_it_inherited_open_once_another_is_at_the_path(tmp_path: Path) -> None:
    """The connections a child inherited idle (here a second handle's, never used in the child)
    kept the replaced index file allocated, deleted, for the child's whole life."""
    catalog = _seed(tmp_path, 300)
    other = MemoryCatalog(tmp_path)
    assert other.search("word3", limit=1)
    out = tmp_path / "child.json"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(30)
        try:
            catalog.reindex(full=True)  # a new file at the path
            scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
            same = catalog.search("word3", limit=10_000) == scan.search("word3", limit=10_000)
            fds = Path("/proc/self/fd")
            deleted = [
                target
                for target in (os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink())
                if "memstore.sqlite3" in target and target.endswith("(deleted)")
            ]
            out.write_text(json.dumps({"same": same, "deleted": deleted}))
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert json.loads(out.read_text()) == {"same": True, "deleted": []}
    assert other.search("word3", limit=10_000) == MemoryCatalog(tmp_path, use_index=False).search("word3", limit=10_000)

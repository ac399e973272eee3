"""Review round 26a: the removal scan of delete_by_branch / delete_by_run_id / quarantine_by_branch, attacked.

The reference is the reader: :func:`memstore.scan.scan_fd` (what ``MemoryCatalog(...,
use_index=False)`` lists), over the lines :func:`memstore.files.iter_raw_lines` splits.
A removal must drop exactly the entries it sees with the value (and blank lines), keep
every other line byte for byte, and leave an index that answers as a scan does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memstore.files
from memstore import jsonl, rewrite_scan
from memstore.catalog import MemoryCatalog
from memstore.files import iter_raw_lines
from memstore.index.catalog_index import CatalogIndex
from memstore.jsonl import is_blank
from memstore.rewrite_scan import scan_for_removal
from memstore.scan import scan_fd

TARGET = "feature/x"
SMALL_MAX = 160
"""MAX_LINE_BYTES for the tests that need lines longer than a reader takes (the real one is 64 MiB)."""


def _reader_view(fd: int, size: int, key: str, value: str) -> tuple[list[int], bytes]:
    """The starts of the lines a reader sees as entries with ``key == value``, and the file without them
    (nor blank lines), every line ending in a newline."""
    removed = [item.order for item in scan_fd(fd, size=size).entries if getattr(item.entry, key) == value]
    kept = []
    for raw in iter_raw_lines(fd, stop=size):
        if raw.start in removed or is_blank(raw.data):
            continue
        kept.append(os.pread(fd, raw.end - raw.start, raw.start).removesuffix(b"\n") + b"\n")
    return removed, b"".join(kept)


def _scanned(fd: int, size: int, key: str, value: str, block: int) -> tuple[list[int], bytes]:
    scan = scan_for_removal(fd, size, key=key, value=value, block=block)
    kept = b"".join(os.pread(fd, end - start, start) for start, end in scan.kept) + scan.tail
    return sorted(scan.removed_starts), kept


def _entry(branch: object = TARGET, *, content: object = "note", memory_id: str = "m1", **extra: object) -> bytes:
    payload = {"memory_id": memory_id, "content": content, "created_at": "2026", "branch_name": branch, **extra}
    return json.dumps(payload, sort_keys=True).encode()


# ------------------------------------------------------------------ a line exactly as long as a reader takes


def _line_of(length: int, branch: str, memory_id: str) -> bytes:
    line = _entry(branch, content="", memory_id=memory_id)
    line = _entry(branch, content="y" * (length - len(line)), memory_id=memory_id)
    assert len(line) == length
    return line


@pytest.mark.parametrize("block", [16, 64])
def test_a_line_of_exactly_the_readers_limit_is_scanned_when_longer_than_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """A reader takes a line of MAX_LINE_BYTES bytes (its newline not counted); the scan's
    long-line path counted the newline and kept such a line unread, matching entry and all."""
    monkeypatch.setattr(memstore.files, "MAX_LINE_BYTES", SMALL_MAX)
    lines = [_line_of(length, "gone", f"m{length}") for length in (SMALL_MAX - 1, SMALL_MAX, SMALL_MAX + 1)]
    path = tmp_path / "memory.jsonl"
    data = b"\n".join([_entry("main"), *lines, _entry("main", memory_id="m2")]) + b"\n"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        expected = _reader_view(fd, len(data), "branch_name", "gone")
        assert len(expected[0]) == 2  # the line of SMALL_MAX + 1 bytes is skipped by readers
        assert _scanned(fd, len(data), "branch_name", "gone", block) == expected
    finally:
        os.close(fd)


def test_delete_removes_an_entry_on_a_line_of_exactly_the_readers_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memstore.files, "MAX_LINE_BYTES", SMALL_MAX)
    monkeypatch.setitem(rewrite_scan.scan_for_removal.__kwdefaults__, "block", 64)  # as 8 MiB blocks to 64 MiB
    catalog = MemoryCatalog(tmp_path)  # its own lines are longer than SMALL_MAX: written here instead
    lines = [_entry("main", content="kept"), _line_of(SMALL_MAX, "gone", "exact"), _entry("main", content="too")]
    catalog.path.write_bytes(b"\n".join(lines) + b"\n")
    reader = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert [entry.memory_id for entry in reader.list(branch_name="gone")] == ["exact"]
    assert catalog.delete_by_branch("gone") == 1
    assert reader.list(branch_name="gone") == []
    assert [entry.content for entry in MemoryCatalog(tmp_path).list()] == ["too", "kept"]
    assert catalog.path.read_bytes() == lines[0] + b"\n" + lines[2] + b"\n"


# ------------------------------------------------------------------ which parser reads a deeply nested line


def _deep_entry(depth: int, branch: str) -> bytes:
    nested = '{"x": ' * depth + "1" + "}" * depth
    return _entry(branch, memory_id=f"deep{depth}").removesuffix(b"}") + b', "x": ' + nested.encode() + b"}"


def test_a_deep_line_reads_the_same_in_a_fresh_process_as_in_a_busy_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process parses its first lines with the stdlib, whose depth limit is the recursion limit
    less the stack in use; orjson (after them) takes 1024 levels.  A line 1000 deep was an entry
    to one and corrupt to the other: which one a reader saw depended on what it had read before."""
    if not jsonl.load_orjson():
        pytest.skip("orjson is not installed: the stdlib reads every line")
    line = _deep_entry(1000, "gone")
    busy = jsonl.decode_entry(line)
    monkeypatch.setattr(jsonl, "_orjson", None)
    monkeypatch.setattr(jsonl, "_stdlib_lines", 0)  # as in a process that has parsed nothing yet
    assert jsonl.decode_entry(line) == busy
    assert busy is not None and busy.branch_name == "gone"


def test_delete_in_a_fresh_process_removes_the_deep_entry_a_busy_reader_lists(tmp_path: Path) -> None:
    if not jsonl.load_orjson():
        pytest.skip("orjson is not installed: the stdlib reads every line")
    catalog = MemoryCatalog(tmp_path)
    for n in range(jsonl.STDLIB_FIRST_LINES + 10):
        catalog.add(f"note {n}", branch_name="main")
    with open(catalog.path, "ab") as handle:
        handle.write(_deep_entry(1000, "gone") + b"\n")
    opened = "from memstore.catalog import MemoryCatalog; import sys; c = MemoryCatalog(sys.argv[1]"
    listed = opened + ", use_index=False); print(len(c.list(limit=1000, branch_name='gone')))"
    deleted = opened + "); print(c.delete_by_branch('gone'))"

    def run(code: str) -> str:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run(listed) == "1"
    assert run(deleted) == "1"
    assert run(listed) == "0"


# ------------------------------------------------------------------ the scan against the reader, hostile lines

_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


@st.composite
def _spelled(draw: st.DrawFn, text: str, style: str | None = None) -> str:
    """``text`` as a JSON string: "plain" with escapes only where text needs them (as real lines
    are), "short" with every two-character escape that fits, "any" each character any legal way."""
    if style is None:
        style = draw(st.sampled_from(["plain", "short", "any"]))
    out = []
    for char in text:
        code = ord(char)
        ways = []
        if char not in '"\\' and code >= 0x20 and not 0xD800 <= code <= 0xDFFF:
            ways.append(char)
        if char in _SHORT:
            ways.append(_SHORT[char])
        if code < 0x10000:
            ways.append(f"\\u{code:04x}")
        else:
            high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
            ways.append(f"\\u{high:04X}\\u{low:04x}")
        if style == "plain":
            out.append(ways[0])
        elif style == "short":
            out.append(_SHORT.get(char, ways[0]))
        else:
            out.append(draw(st.sampled_from(ways)))
    return '"' + "".join(out) + '"'


VALUES = ["feature/x", "", "\n", '"', "\\", "caf\u00e9/\U0001f600", "\ud800", "content", '"content": "', " x "]
TRICKY_TEXT = [
    "note",
    '"content": "',  # spelled, its quotes are escaped: the bytes \"content\": \"
    '"branch_name": "feature/x"',
    "feature/x",
    'a\nb \\ "q"',
    "x" * 150,  # with the envelope, longer than SMALL_MAX
]


@st.composite
def _value_json(draw: st.DrawFn, value: str, plain: str | None) -> str:
    """A JSON value that may or may not be (a spelling of) ``value``."""
    kind = draw(st.sampled_from(["value"] * 5 + ["other", "other", "null", "number", "list", "object", "true"]))
    if kind == "value":
        return draw(_spelled(value))
    if kind == "other":
        return draw(_spelled(draw(st.sampled_from([value + " ", value[:-1], "feature/y", "main"]))))
    if kind == "list":
        return "[" + draw(_spelled(value)) + "]"
    if kind == "object":
        inner = draw(st.sampled_from(["content", "branch_name", "run_id"]))
        return "{" + draw(_spelled(inner, plain)) + ": " + draw(_spelled(value)) + "}"
    return {"null": "null", "number": "1", "true": "true"}[kind]


@st.composite
def _hostile_line(draw: st.DrawFn, key: str, value: str) -> bytes:
    kind = draw(st.sampled_from(["entry"] * 12 + ["raw", "blank", "not-object", "torn"]))
    if kind == "raw":
        return draw(st.binary(max_size=40)).replace(b"\n", b"")
    if kind == "blank":
        return draw(st.sampled_from([b"", b" ", b"\t\r", b"\xef\xbb\xbf", b"\xef\xbb\xbf \r", b"\x0b\x0c"]))
    if kind == "not-object":
        return ("[" + draw(_spelled(value)) + "]").encode("utf-8", "surrogatepass")
    # Mostly, only the values (and the text) may hold escapes: as in real lines, where one
    # escape outside the content string in the wrong place must not go unseen.
    plain = draw(st.sampled_from(["plain", "plain", "plain", None]))
    fields = [
        ("memory_id", draw(_spelled(draw(st.sampled_from(["m1", "m2", "m3", " "])), plain))),
        ("content", draw(_spelled(draw(st.sampled_from([*TRICKY_TEXT, value, " "])), plain and "short"))),
        ("created_at", draw(st.sampled_from(['"2026"'] * 4 + ['""', "null"]))),
    ]
    if draw(st.booleans()):
        fields.append(("tags", "[" + draw(_spelled(draw(st.sampled_from(["t", "a\nb", value])), plain)) + "]"))
    for _ in range(draw(st.integers(1, 3))):  # duplicate keys: the last one counts
        name = draw(st.sampled_from([key, key, key, "branch_name", "run_id", "metadata"]))
        fields.append((name, draw(_value_json(value, plain))))
    if draw(st.booleans()):  # a nested object holding "content": "..." before the key
        text = draw(_spelled(draw(st.sampled_from(TRICKY_TEXT)), plain and "short"))
        fields.insert(0, ("meta", '{"content": ' + text + "}"))
    order = draw(st.permutations(range(len(fields))))
    sep, colon = draw(st.sampled_from([(", ", ": "), (", ", ": "), (",", ":"), (" ,", " : ")]))
    body = sep.join(draw(_spelled(fields[i][0], plain)) + colon + fields[i][1] for i in order)
    line = ("{" + body + "}").encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 3)) == 0:  # padded to about a reader's limit (SMALL_MAX)
        pad = SMALL_MAX + draw(st.integers(-2, 1)) - len(line) - len(', "z": ""')
        line = line[:-1] + b', "z": "' + b"z" * max(0, pad) + b'"}'
    if kind == "torn":
        line = line[: draw(st.integers(1, max(1, len(line) - 1)))]
    prefix = draw(st.sampled_from([b""] * 6 + [b"\xef\xbb\xbf", b" ", b"\t"]))
    suffix = draw(st.sampled_from([b""] * 6 + [b"\r", b" ", b"\x00"]))
    return prefix + line + suffix


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    data=st.data(),
    key=st.sampled_from(["branch_name", "run_id"]),
    value=st.sampled_from(VALUES),
    block=st.sampled_from([1, 9, 64, SMALL_MAX, SMALL_MAX + 1, 1 << 20]),
    unterminated=st.booleans(),
)
def test_the_scan_drops_exactly_what_the_reader_sees(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, key: str, value: str, block: int, unterminated: bool
) -> None:
    lines = data.draw(st.lists(_hostile_line(key, value), max_size=8))
    raw = b"\n".join(line.replace(b"\n", b"") for line in lines)
    if raw and not unterminated:
        raw += b"\n"
    path = tmp_path_factory.mktemp("scan") / "memory.jsonl"
    path.write_bytes(raw)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(memstore.files, "MAX_LINE_BYTES", SMALL_MAX)
            assert _scanned(fd, len(raw), key, value, block) == _reader_view(fd, len(raw), key, value)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ the index after a delete of hostile lines


def _answers(catalog: MemoryCatalog) -> tuple[object, ...]:
    return (
        catalog.list(limit=1000),
        catalog.list(limit=1000, branch_name=TARGET),
        catalog.list(limit=1000, run_id=TARGET),
        catalog.search("note", limit=1000),
        catalog.search("feature", limit=1000),
        catalog.health().total_entries,
    )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    data=st.data(),
    key=st.sampled_from(["branch_name", "run_id"]),
    value=st.sampled_from([TARGET, "", "\n", "caf\u00e9/\U0001f600", "\ud800"]),
    unterminated=st.booleans(),
    quarantine=st.booleans(),
)
def test_after_a_delete_of_hostile_lines_every_handle_answers_as_a_scan(
    tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
    key: str,
    value: str,
    unterminated: bool,
    quarantine: bool,
) -> None:
    root = tmp_path_factory.mktemp("catalog")
    catalog = MemoryCatalog(root)
    lines = data.draw(st.lists(_hostile_line(key, value), max_size=8))
    raw = b"\n".join(line.replace(b"\n", b"") for line in lines)
    if raw and not unterminated:
        raw += b"\n"
    catalog.path.write_bytes(raw)
    first = MemoryCatalog(root)
    _answers(first)  # its index is built from the file as it was
    fd = os.open(catalog.path, os.O_RDONLY)
    try:
        expected, kept = _reader_view(fd, len(raw), key, value)
    finally:
        os.close(fd)
    listed = MemoryCatalog(root, use_index=False, readonly=True).list(limit=1000, **{key: value})
    if quarantine and key == "branch_name":
        deleted = catalog.quarantine_by_branch(value, "review")
        assert catalog.list_quarantined(limit=1000) == listed
    elif key == "branch_name":
        deleted = catalog.delete_by_branch(value)
    else:
        deleted = catalog.delete_by_run_id(value)
    assert deleted == len(expected) == len(listed)
    scan = _answers(MemoryCatalog(root, use_index=False, readonly=True))
    assert _answers(catalog) == scan
    assert _answers(first) == scan
    assert _answers(MemoryCatalog(root)) == scan
    torn = list(catalog.directory.glob("memory.jsonl.torn-*"))
    if torn:  # an unterminated last line that does not parse is set aside, as any writer does
        assert torn[0].read_bytes() == kept.splitlines()[-1]
        kept = b"".join(kept.splitlines(keepends=True)[:-1])
    if deleted:
        assert catalog.path.read_bytes() == kept


# ------------------------------------------------------------------ memory on a file of blank lines


_PEAK = """
import os, sys, tracemalloc
from memstore.rewrite_scan import scan_for_removal
fd = os.open(sys.argv[1], os.O_RDONLY)
tracemalloc.start()
scan = scan_for_removal(fd, os.fstat(fd).st_size, key="branch_name", value="feature/x")
assert len(scan.removed) == 1
print(tracemalloc.get_traced_memory()[1] >> 10)
"""
"""The scan's peak of Python allocations in KiB (tracemalloc: the same in every run, unlike a
peak RSS, which the allocator's state and the machine's other users move)."""


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"\n" * (2 << 20), id="a-run"),
        pytest.param(
            b"{}\n\n" * (1 << 19),
            id="between-other-lines",
            marks=pytest.mark.xfail(strict=True, reason="review 26a: a dropped range per blank line between others"),
        ),
    ],
)
def test_a_file_of_blank_lines_is_scanned_in_bounded_memory(tmp_path: Path, body: bytes) -> None:
    """A reader counts blank lines; the removal scan kept a set entry per blank line of a block
    and a (start, length) per blank line of the file: 4 MB of newlines took 750 MB, 40 MB ~7 GB.
    A run of blank lines is now one dropped range; blank lines each between two kept lines still
    cost a range each (148 MiB for 2 MiB of ``{}`` and blank lines)."""
    path = tmp_path / "memory.jsonl"
    path.write_bytes(_entry() + b"\n" + body + _entry("main") + b"\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    grown_kib = int(done.stdout)
    assert grown_kib < 48 << 10, f"{grown_kib >> 10} MiB more for {len(body)} bytes of lines"


@pytest.mark.parametrize("runs", [3, 200], ids=["few-runs", "more-runs-than-sparse-drops"])
def test_the_index_follows_a_delete_that_drops_runs_of_blank_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: int
) -> None:
    """A run of blank lines is one dropped range now: the index shifts the rows after it by its length."""
    followed = []
    real_apply = CatalogIndex.apply_rewrite

    def apply_rewrite(self: CatalogIndex, *args: Any, **kwargs: Any) -> bool:
        followed.append(real_apply(self, *args, **kwargs))
        return followed[-1]

    monkeypatch.setattr(CatalogIndex, "apply_rewrite", apply_rewrite)
    catalog = MemoryCatalog(tmp_path)
    lines = []
    for n in range(runs):
        lines.append(_entry(TARGET if n % 3 == 0 else "main", content=f"note {n}", memory_id=f"m{n}") + b"\n")
        lines.append([b"\n" * 50, b" \t\r\n" * 7, b"\xef\xbb\xbf\n\n \n"][n % 3])
    catalog.path.write_bytes(b"".join(lines))
    first = MemoryCatalog(tmp_path)
    _answers(first)
    assert catalog.delete_by_branch(TARGET) == len(range(0, runs, 3))
    assert followed == [True]  # followed, not left to a rebuild
    assert catalog.path.read_bytes() == b"".join(line for line in lines[::2] if TARGET.encode() not in line)
    scan = _answers(MemoryCatalog(tmp_path, use_index=False, readonly=True))
    assert _answers(catalog) == scan
    assert _answers(first) == scan
    assert _answers(MemoryCatalog(tmp_path)) == scan
    assert catalog.check_index().equal


@pytest.mark.xfail(
    strict=True, reason="review 26a: without orjson the stdlib's depth limit is the recursion limit less the stack"
)
def test_without_orjson_a_deep_line_reads_the_same_from_any_stack_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without orjson every line is read by the stdlib, which refuses a line nested deeper than the
    frames left: the same line is an entry to a caller near the top of its stack (a CLI) and
    corrupt to one deep in it (a server, a framework), so a delete and a reader can disagree."""
    monkeypatch.setattr(jsonl, "_orjson", False)
    depth = 50
    while jsonl.decode_entry(_deep_entry(depth + 50, "gone")) is not None:
        depth += 50  # the deepest line readable from here, to 50 levels
    line = _deep_entry(depth, "gone")
    here = jsonl.decode_entry(line)
    assert here is not None

    def nested(frames: int) -> object:
        return jsonl.decode_entry(line) if frames == 0 else nested(frames - 1)

    assert nested(100) == here

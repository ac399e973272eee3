"""Bad input, each with the outcome it must get.

Pinned paths that escape the root or name secrets are refused with False and a
warning, writing nothing; search queries that are FTS5 syntax are matched
literally (the index equals the scan); huge content and huge lines are handled in
bounded memory; lines that do not parse are skipped and counted while the rest is
served; lines Python's json accepts are read by the index exactly as by the scan;
personal memory is private on disk.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import reliability_workers as workers

from memstore.catalog import MemoryCatalog
from memstore.errors import InvalidArgumentError, MemstoreError
from memstore.files import MAX_LINE_BYTES
from memstore.hierarchy import MemoryHierarchy
from memstore.pinned import PinnedFileStorage

SPAWN = multiprocessing.get_context("spawn")
MiB = 1024 * 1024

# ----------------------------------------------------------------------------- pinned paths

ESCAPING = ["../x", "../../etc/passwd", "a/../../x", "/etc/passwd", "C:\\x", "c:/x", "\\\\srv\\share\\x", "a\x00b", ""]
SECRETS = [
    ".env",
    ".env.local",
    "config/.env.production",
    "id_ed25519",
    "id_rsa.pub",
    "keys/x.pem",
    "server.key",
    "credentials.json",
    "gcp-service-account.json",
    ".ssh/config",
    "home/.ssh/known_hosts",
    ".gnupg/pubring.kbx",
    ".aws/credentials",
    ".netrc",
    ".npmrc",
    ".git/config",
    ".ENV",
]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "notes.txt").write_text("fine")
    return root


def _refused(root: Path, path: str, caplog: pytest.LogCaptureFixture) -> None:
    storage = PinnedFileStorage(root)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memstore.pinned"):
        assert storage.add(path) is False
    assert any(record.levelno == logging.WARNING for record in caplog.records), path
    assert not (root / ".teaagent").exists(), f"{path!r} wrote something"
    assert storage.list_all() == []


@pytest.mark.parametrize("path", ESCAPING)
def test_pin_outside_the_root_is_refused(workspace: Path, path: str, caplog: pytest.LogCaptureFixture) -> None:
    _refused(workspace, path, caplog)


@pytest.mark.parametrize("path", SECRETS)
def test_pin_of_a_secret_is_refused_even_when_it_exists(
    workspace: Path, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = workspace / path.replace("\\", "/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("SECRET=1")
    _refused(workspace, path, caplog)


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("link-out", "/etc/passwd"),
        ("link-dangling-out", "/nonexistent-memstore/x"),
        ("link-up", "../outside.txt"),
        ("link-to-secret", ".env"),
        ("link-to-key", "keys/id_ed25519"),
        ("dir-link/notes.txt", None),
    ],
)
def test_pin_through_a_symlink_leading_out_is_refused(
    workspace: Path, tmp_path: Path, name: str, target: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "outside.txt").write_text("outside")
    (workspace / ".env").write_text("SECRET=1")
    (workspace / "keys").mkdir()
    (workspace / "keys" / "id_ed25519").write_text("KEY")
    if target is None:
        (workspace / "dir-link").symlink_to(tmp_path)  # a directory symlink leading out
        (tmp_path / "notes.txt").write_text("outside")
    else:
        (workspace / name).symlink_to(target)
    _refused(workspace, name, caplog)


def test_pin_inside_the_root_is_accepted(workspace: Path) -> None:
    storage = PinnedFileStorage(workspace)
    (workspace / "link-in").symlink_to("notes.txt")
    assert storage.add("notes.txt") is True
    assert storage.add("link-in") is True
    assert [pin.file_path for pin in storage.list_all()] == ["notes.txt", "link-in"]


# ----------------------------------------------------------------------------- queries

FTS_QUERIES = [
    "AND",
    "OR",
    "NOT",
    "NEAR(",
    "NEAR(alpha beta)",
    '"',
    '"alpha',
    '""',
    "*",
    "alp*",
    "col:x",
    "c:alpha",
    "t:tag",
    "-x",
    "-alpha",
    "^x",
    "^alpha",
    "alpha AND beta",
    "alpha OR beta",
    "(alpha",
    "alpha)",
    "{c t}: alpha",
    "don't",
    "multi-agent",
    "a\x00b",
    "\x00",
    "\x01\x02",
    "\ud800",
    "'; DROP TABLE doc; --",
    "%",
    "_",
    "alpha%",
]


@pytest.fixture
def queried(tmp_path: Path) -> tuple[MemoryCatalog, MemoryCatalog]:
    catalog = MemoryCatalog(tmp_path)
    texts = [
        "alpha beta",
        "col:x and -x and ^x",
        'quoted "alpha" NEAR(beta)',
        "multi-agent systems don't AND OR NOT",
        "star * and percent % and under_score",
        "nul \x00 inside",
        "lone \ud800 surrogate",
        "'; DROP TABLE doc; --",
        "c:alpha t:tag {c t}",
    ]
    for n, text in enumerate(texts):
        catalog.add(text, tags=["tag", f"t{n}"])
    return catalog, MemoryCatalog(tmp_path, use_index=False, readonly=True)


@pytest.mark.parametrize("query", FTS_QUERIES)
def test_fts_syntax_in_queries_is_matched_literally(queried: tuple[MemoryCatalog, MemoryCatalog], query: str) -> None:
    catalog, scan = queried
    assert catalog.search(query, limit=50) == scan.search(query, limit=50)
    assert catalog.check_index().equal
    assert not list(catalog.directory.joinpath("index").glob("*.damaged-*"))


def test_literal_matching_finds_the_syntax_itself(queried: tuple[MemoryCatalog, MemoryCatalog]) -> None:
    catalog, _scan = queried
    assert [e.content for e in catalog.search("col:x")] == ["col:x and -x and ^x"]
    assert [e.content for e in catalog.search("NEAR(beta)")] == ['quoted "alpha" NEAR(beta)']
    assert [e.content for e in catalog.search("\x00")] == ["nul \x00 inside"]
    assert [e.content for e in catalog.search("don't multi-agent")] == ["multi-agent systems don't AND OR NOT"]


def test_a_long_single_token_query_is_answered(queried: tuple[MemoryCatalog, MemoryCatalog]) -> None:
    catalog, scan = queried
    query = "alpha" * 20_000  # 100,000 characters, one token
    assert catalog.search(query) == scan.search(query) == []
    assert not list(catalog.directory.joinpath("index").glob("*.damaged-*"))


def test_a_query_of_many_tokens_keeps_the_index(queried: tuple[MemoryCatalog, MemoryCatalog]) -> None:
    catalog, scan = queried
    query = " ".join(f"w{n}" for n in range(25_000))[:100_000]  # 100,000 characters
    assert catalog.search(query) == scan.search(query) == []
    assert not list(catalog.directory.joinpath("index").glob("*.damaged-*"))
    assert catalog.health_report()["index"].get("state") != "unavailable"


def test_a_query_of_many_tokens_raises_nothing_and_matches_the_scan(
    queried: tuple[MemoryCatalog, MemoryCatalog],
) -> None:
    catalog, scan = queried
    query = "alpha " * 16_000 + "beta"  # 100,000 characters, duplicates of two tokens
    assert catalog.search(query) == scan.search(query)
    assert [e.content for e in catalog.search(query)] == ['quoted "alpha" NEAR(beta)', "alpha beta"]


# ----------------------------------------------------------------------------- huge content and lines


def test_ten_mebibytes_of_content_round_trip(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    content = "needle " + "z" * (10 * MiB)
    entry = catalog.add(content)
    assert catalog.show(entry.memory_id).content == content
    assert catalog.search("needle") == [entry]
    assert MemoryCatalog(tmp_path, use_index=False).search("needle") == [entry]
    assert catalog.check_index().equal


def test_content_too_large_for_readers_is_refused_not_lost(tmp_path: Path) -> None:
    """An entry whose line readers would skip must not be acknowledged (6 MiB of emoji is 72 MiB of JSON)."""
    catalog = MemoryCatalog(tmp_path)
    content = "😀" * (MAX_LINE_BYTES // 12 + 1)
    with pytest.raises(InvalidArgumentError):
        catalog.add(content)
    with pytest.raises(InvalidArgumentError):
        catalog.add_quarantined(content, provenance={"source": "web"})
    assert not catalog.path.exists() or catalog.path.read_bytes() == b""
    assert isinstance(InvalidArgumentError("x"), MemstoreError)


def _write_huge_line(path: Path, size: int, *, terminated: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    good = {"memory_id": "ok1", "content": "needle before", "tags": [], "created_at": "2026-01-01T00:00:00+00:00"}
    with open(path, "wb") as handle:
        handle.write(json.dumps(good).encode() + b"\n")
        handle.write(b'{"memory_id": "huge", "content": "needle ')
        block = b"q" * MiB
        for _ in range(size // MiB):
            handle.write(block)
        if terminated:
            handle.write(b'", "created_at": "2026"}\n')
            good["memory_id"] = "ok2"
            good["content"] = "needle after"
            handle.write(json.dumps(good).encode() + b"\n")


@pytest.mark.stress
@pytest.mark.parametrize("mode", ["scan", "index"])
@pytest.mark.parametrize("terminated", [True, False])
def test_a_100_mib_line_is_read_in_bounded_memory(tmp_path: Path, mode: str, terminated: bool) -> None:
    root = tmp_path / "repo"
    _write_huge_line(root / ".teaagent" / "memory.jsonl", 100 * MiB, terminated=terminated)
    out = tmp_path / "rss"
    process = SPAWN.Process(target=workers.peak_rss_growth, args=(str(root), mode, str(out)))
    process.start()
    process.join(600)
    assert process.exitcode == 0, out.with_suffix(".err").read_text() if out.with_suffix(".err").exists() else ""
    growth, found, corrupt, total = (int(x) for x in out.read_text().split("\t"))
    workers.figure("huge-line", mode=mode, terminated=terminated, line_mib=100, rss_growth_mib=round(growth / MiB, 1))
    assert found == (2 if terminated else 1)
    assert corrupt == 1 and total == found
    assert growth < 64 * MiB, f"peak RSS grew by {growth / MiB:.1f} MiB reading a 100 MiB line"


# ----------------------------------------------------------------------------- lines that do not parse

UNPARSEABLE = {
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "deep_object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "deep_in_entry": b'{"memory_id": "d", "content": "x", "created_at": "2026", "x": '
    + b"[" * 100_000
    + b"]" * 100_000
    + b"}",
    "big_int": b'{"memory_id": "i", "content": "x", "created_at": "2026", "n": ' + b"7" * 5000 + b"}",
    "invalid_utf8": b'{"memory_id": "u", "content": "\xff\xfe", "created_at": "2026"}',
    "glued": b'{"memory_id": "g1", "content": "x", "created_at": "2026"}{"memory_id": "g2"}',
    "brace_pair": b"}{",
    "nul_bytes": b"\x00" * 4096,
    "conflict_marker": b"<<<<<<< HEAD",
    "truncated": b'{"memory_id": "t", "content": "x", "created_at": "20',
    "not_object": b'["memory_id", "content"]',
    "wrong_types": b'{"memory_id": 5, "content": "x", "created_at": "2026"}',
}


def _good(memory_id: str, content: str) -> bytes:
    return json.dumps(
        {"memory_id": memory_id, "content": content, "tags": ["t"], "created_at": "2026-01-01T00:00:00+00:00"}
    ).encode()


@pytest.mark.parametrize("name", sorted(UNPARSEABLE))
@pytest.mark.parametrize("use_index", [True, False])
def test_a_line_that_does_not_parse_is_skipped_and_counted(tmp_path: Path, name: str, use_index: bool) -> None:
    path = tmp_path / ".teaagent" / "memory.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(
        _good("a", "first needle") + b"\n" + UNPARSEABLE[name] + b"\n" + _good("b", "second needle") + b"\n"
    )
    catalog = MemoryCatalog(tmp_path, use_index=use_index)
    assert [e.memory_id for e in catalog.search("needle")] == ["a", "b"]
    assert [e.memory_id for e in catalog.list()] == ["b", "a"]
    assert catalog.show("b").content == "second needle"
    health = catalog.health_report()
    assert (health["corrupt_entries"], health["total_entries"], health["healthy"]) == (1, 2, False)
    if use_index:
        assert catalog.check_index().equal
    entry = catalog.add("third needle")  # writing still works, and keeps the bad line as it was
    assert UNPARSEABLE[name] in path.read_bytes().split(b"\n")
    assert catalog.search("needle")[0] == entry  # the newest of equal scores


# ----------------------------------------------------------------------------- lines json accepts

ACCEPTED = [
    b'{"memory_id": "nan", "content": "nan content", "created_at": "2026", "x": NaN, "y": -Infinity}',
    b'{"memory_id": "dup", "content": "first value", "content": "dup content", "created_at": "2026"}',
    b'{"memory_id": "dup2", "memory_id": "dup3", "content": "dup id", "created_at": "2026"}',
    b'{"memory_id": "s\\ud800", "content": "lone \\ud800 content", "tags": ["\\udfff"], "created_at": "2026"}',
    b'{"memory_id": "s2", "content": "pair \\ud83d\\ude00 content", "created_at": "\\ud800"}',
    b'{"memory_id": "bom", "content": "\\ufeff bom content", "created_at": "2026"}',
    b'{"memory_id": "cr", "content": "crlf content", "created_at": "2026"}\r',
    b'{"memory_id": " spaced ", "content": "  padded content  ", "tags": [" A ", "a", ""], "created_at": "2026"}',
    b'{"memory_id": "nul", "content": "nul \\u0000 content", "created_at": "2026"}',
    b'{"memory_id": "big", "content": "big number content", "created_at": "2026", "n": 1e400}',
    b'{"memory_id": "u", "content": "\\u0130stanbul content \\u1e9e", "created_at": "2026"}',
]


@pytest.mark.parametrize("line", ACCEPTED, ids=lambda line: line[15:25].decode(errors="replace"))
def test_lines_json_accepts_are_read_by_the_index_as_by_the_scan(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / ".teaagent" / "memory.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(_good("a", "plain content") + b"\n" + line + b"\n")
    indexed = MemoryCatalog(tmp_path)
    scan = MemoryCatalog(tmp_path, use_index=False, readonly=True)
    assert indexed.list(limit=10) == scan.list(limit=10)
    assert len(scan.list(limit=10)) == 2
    for query in ["content", "lone", "\ud800", "\udfff", "dup", "nan", "istanbul", "i̇stanbul", "ẞ", "ß", "\x00", "a"]:
        assert indexed.search(query) == scan.search(query), query
    for entry in scan.list(limit=10):
        assert indexed.show(entry.memory_id) == scan.show(entry.memory_id)
    assert indexed.check_index().equal


# ----------------------------------------------------------------------------- personal tier


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A permissive umask, so only explicit modes can make files private."""
    old = os.umask(0o002)
    yield
    os.umask(old)


@pytest.mark.usefixtures("open_umask")
def test_personal_tier_is_private(home: Path, tmp_path: Path) -> None:
    hierarchy = MemoryHierarchy(tmp_path / "repo")
    hierarchy.personal.add("personal note", branch_name="b")
    hierarchy.personal.add_quarantined("from the web", provenance={"source": "web"})
    assert hierarchy.personal.search("note")
    hierarchy.personal.delete_by_branch("none")
    hierarchy.personal.quarantine_by_branch("b", "test")
    hierarchy.personal.add("again")
    directory = home / ".config" / "teaagent"
    for path in [directory, *directory.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_dir():
            assert mode == 0o700, f"{path} is {mode:o}"
        elif path.name != ".gitignore":
            assert mode == 0o600, f"{path} is {mode:o}"
        assert mode & 0o077 == 0 or path.name == ".gitignore", f"{path} is readable by others ({mode:o})"

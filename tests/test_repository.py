"""memstore inside a real git repository: discovery, reads without side effects, merges, doctor.

Every test here runs the real ``git`` in temporary repositories; the CLI runs as a
subprocess with ``memstore`` (the console script of this interpreter) on PATH, so git
can call the ``memstore merge-json`` driver.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bounded import run_bounded

from memstore.cards import FailureCard
from memstore.catalog import MemoryCatalog
from memstore.doctor import diagnose
from memstore.errors import NotRegularFileError, StorageError
from memstore.failure_cards import FailureCardStorage
from memstore.files import MAX_JSON_FILE_BYTES
from memstore.json_array import JsonArrayFile
from memstore.layout import GITATTRIBUTES, GITIGNORE, ensure_store
from memstore.merge_json import register_driver
from memstore.pinned import PinnedFileStorage
from memstore.root import find_root
from memstore.team import TeamMemory

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

BIN = str(Path(sys.executable).parent)


def base_env(home: Path | None) -> dict[str, str]:
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), COLUMNS="200")
    env.update(
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid", GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.invalid", GIT_CONFIG_NOSYSTEM="1",
    )
    for name in ("MEMSTORE_ROOT", "MEMSTORE_DEBUG", "GIT_DIR", "GIT_WORK_TREE"):
        env.pop(name, None)
    if home is None:
        env.pop("HOME", None)
    else:
        env["HOME"] = str(home)
    return env


def git(cwd: Path, *args: str, check: bool = True, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, env=base_env(home or cwd.parent),
        capture_output=True, text=True, timeout=120, check=False,
    )
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def memstore(cwd: Path, *args: str, home: Path | str | None = "default",
             extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI; HOME is ``<cwd>/../home`` unless given (None: unset)."""
    env = base_env(cwd.parent / "home" if home == "default" else None if home is None else Path(home))
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "memstore", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def listing(top: Path) -> dict[str, Any]:
    """Every path under ``top`` with its type and bytes (the tree, byte for byte)."""
    out: dict[str, Any] = {}
    for path in sorted(top.rglob("*")):
        if ".git" in path.relative_to(top).parts:
            continue
        st = path.lstat()
        key = str(path.relative_to(top))
        if stat.S_ISREG(st.st_mode):
            out[key] = path.read_bytes()
        else:
            out[key] = stat.S_IFMT(st.st_mode)
    return out


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README.md").write_text("hello\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "start")
    return root


def card(card_id: str, *, timestamp: float = 1000.0, **extra: Any) -> FailureCard:
    payload = {
        "id": card_id, "run_id": "r", "timestamp": timestamp, "error_type": "E", "file_path": "a.py",
        "line_number": None, "error_message": f"message {card_id}", "task_description": "task",
        "context_files": [], "expires_at": None, **extra,
    }
    made = FailureCard.from_dict(payload)
    assert made is not None
    return made


def commit_all(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


# ----------------------------------------------------------------------------- merges


def _branch_work(root: Path, branch: str, adds: int, *, via_cli: bool) -> set[str]:
    git(root, "checkout", "-q", "-b", branch, "main")
    ids = set()
    if via_cli:
        for n in range(adds):
            out = json.loads(ok(memstore(root, "add", f"{branch} note {n}", "--tag", branch, "--json")))
            ids.add(out["entry"]["memory_id"])
        ok(memstore(root, "team", "add", f"{branch} team note"))
    else:
        catalog = MemoryCatalog(root)
        ids = {catalog.add(f"{branch} note {n}", tags=[branch]).memory_id for n in range(adds)}
        catalog.search("note")  # an index in the working tree, as a user would have
        TeamMemory(root).add(f"{branch} team note")
    FailureCardStorage(root).append(card(f"card-{branch}"))
    (root / f"{branch}.txt").write_text(branch)
    assert PinnedFileStorage(root).add(f"{branch}.txt")
    commit_all(root, f"work on {branch}")
    git(root, "checkout", "-q", "main")
    return ids


def _prepared(repo: Path, branches: list[str], adds: int, *, via_cli: bool) -> tuple[set[str], set[str]]:
    if via_cli:
        ok(memstore(repo, "add", "base entry"))
        ok(memstore(repo, "init", "--git"))
    else:
        MemoryCatalog(repo).add("base entry")
        register_driver(repo)
    FailureCardStorage(repo).append(card("card-base"))
    commit_all(repo, "store")
    base_ids = {entry.memory_id for entry in MemoryCatalog(repo).list(limit=10)}
    ids = set(base_ids)
    for branch in branches:
        ids |= _branch_work(repo, branch, adds, via_cli=via_cli)
    return base_ids, ids


def _check_merged(repo: Path, ids: set[str], branches: list[str]) -> None:
    catalog = MemoryCatalog(repo)
    lines = (repo / ".teaagent" / "memory.jsonl").read_text().splitlines()
    found = [json.loads(line)["memory_id"] for line in lines]
    assert sorted(found) == sorted(ids)  # every entry, each once
    health = catalog.health_report()
    assert health["healthy"] and health["corrupt_entries"] == 0
    assert catalog.check_index().equal
    cards = {c.id for c in FailureCardStorage(repo).list_all()}
    assert cards == {"card-base", *(f"card-{b}" for b in branches)}
    pins = [pin.file_path for pin in PinnedFileStorage(repo).list_all()]
    assert sorted(pins) == sorted(f"{b}.txt" for b in branches)
    notes = TeamMemory(repo).list()
    assert sorted(line.split(" — ", 1)[1] for line in notes) == sorted(f"{b} team note" for b in branches)
    assert ok(memstore(repo, "doctor")).strip().endswith("healthy")


@pytest.mark.parametrize(("count", "adds", "via_cli"), [(2, 25, False), (3, 15, False), (2, 4, True), (3, 3, True)])
def test_branches_merge_in_every_order_without_conflicts(repo: Path, count: int, adds: int, via_cli: bool) -> None:
    branches = [f"b{n}" for n in range(count)]
    _base, ids = _prepared(repo, branches, adds, via_cli=via_cli)
    start = git(repo, "rev-parse", "HEAD").stdout.strip()
    for order in itertools.permutations(branches):
        git(repo, "reset", "-q", "--hard", start)
        for branch in order:
            merged = git(repo, "merge", "-q", "--no-edit", branch, check=False)
            assert merged.returncode == 0, (order, merged.stdout, merged.stderr)
        assert git(repo, "status", "--porcelain").stdout == ""  # locks and index are ignored
        _check_merged(repo, ids, branches)


def test_conflicted_merge_without_attributes_is_repaired_by_doctor(repo: Path) -> None:
    MemoryCatalog(repo).add("base entry")
    FailureCardStorage(repo).append(card("card-base"))
    (repo / ".teaagent" / ".gitattributes").unlink()  # a store from before memstore wrote them
    commit_all(repo, "store")
    ids = {entry.memory_id for entry in MemoryCatalog(repo).list()}
    for branch in ("left", "right"):
        git(repo, "checkout", "-q", "-b", branch, "main")
        catalog = MemoryCatalog(repo)
        ids |= {catalog.add(f"{branch} {n}").memory_id for n in range(5)}
        FailureCardStorage(repo).append(card(f"card-{branch}"))
        commit_all(repo, branch)
        git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-edit", "left")
    merged = git(repo, "merge", "--no-edit", "right", check=False)
    assert merged.returncode != 0 and "CONFLICT" in merged.stdout
    store = repo / ".teaagent"
    conflicted = (store / "memory.jsonl").read_bytes()
    assert b"<<<<<<<" in conflicted

    found = memstore(repo, "doctor")
    assert found.returncode == 1
    marker_line = 1 + conflicted.split(b"\n").index(next(x for x in conflicted.split(b"\n") if x.startswith(b"<<<")))
    assert f".teaagent/memory.jsonl:{marker_line}: error: conflict-marker" in found.stdout
    assert ".teaagent/memory/failures.json:" in found.stdout

    report = json.loads(ok(memstore(repo, "doctor", "--fix", "--json")))
    assert report["healthy"] is True
    backups = [repo / name for name in report["backups"]]
    assert {path.name.split(".backup-")[0] for path in backups} == {"memory.jsonl", "failures.json"}
    assert any(path.read_bytes() == conflicted for path in backups)
    catalog = MemoryCatalog(repo)
    assert sorted(e.memory_id for e in catalog.list(limit=100)) == sorted(ids)
    assert catalog.health_report()["healthy"] and catalog.check_index().equal
    assert {c.id for c in FailureCardStorage(repo).list_all()} == {"card-base", "card-left", "card-right"}
    assert ok(memstore(repo, "doctor")).strip() == "healthy"


def test_an_entry_a_merge_brings_back_from_quarantine_is_found_and_removed_by_doctor(repo: Path) -> None:
    """merge=union cannot express a removal next to the other side's append: doctor must catch it."""
    MemoryCatalog(repo).add("kept note")
    bad = MemoryCatalog(repo).add("branch note", branch_name="feat")
    commit_all(repo, "store")
    git(repo, "checkout", "-q", "-b", "cleanup")
    assert MemoryCatalog(repo).quarantine_by_branch("feat", "bad branch") == 1
    commit_all(repo, "quarantine")
    git(repo, "checkout", "-q", "main")
    MemoryCatalog(repo).add("new note on main")
    commit_all(repo, "more")
    git(repo, "merge", "-q", "--no-edit", "cleanup")
    catalog = MemoryCatalog(repo)
    quarantined = [json.loads(line)["memory_id"] for line in catalog.quarantine_path.read_text().splitlines()]
    assert quarantined == [bad.memory_id]
    assert bad.memory_id in [e.memory_id for e in catalog.list(limit=100)]  # what the union merge did
    found = memstore(repo, "doctor")
    assert found.returncode == 1 and "quarantined-entry" in found.stdout
    ok(memstore(repo, "doctor", "--fix"))
    catalog = MemoryCatalog(repo)
    assert sorted(e.content for e in catalog.list(limit=100)) == ["kept note", "new note on main"]
    assert [e.memory_id for e in catalog.list_quarantined()] == [bad.memory_id]
    assert catalog.check_index().equal


# ----------------------------------------------------------------------------- discovery


def test_discovery_nested_folders_and_memstore_root(repo: Path, tmp_path: Path) -> None:
    deep = repo / "src" / "pkg" / "deep"
    deep.mkdir(parents=True)
    assert find_root(start=deep, environ={}) == repo  # the git top, no store yet
    ok(memstore(deep, "add", "from deep inside"))
    assert (repo / ".teaagent" / "memory.jsonl").exists()
    assert not (deep / ".teaagent").exists()
    inner = repo / "src" / "pkg"
    (inner / ".teaagent").mkdir()
    assert find_root(start=deep, environ={}) == inner  # the nearest store wins over the git top
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert find_root(start=deep, environ={"MEMSTORE_ROOT": str(other)}) == other
    assert find_root(other, start=deep, environ={"MEMSTORE_ROOT": str(repo)}) == other
    assert find_root(start=tmp_path / "home", environ={}) == tmp_path / "home"  # no git, no store: cwd
    ok(memstore(deep, "add", "to the env root", extra_env={"MEMSTORE_ROOT": str(other)}))
    assert (other / ".teaagent" / "memory.jsonl").exists()
    missing = memstore(deep, "list", extra_env={"MEMSTORE_ROOT": str(tmp_path / "nope")})
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "MEMSTORE_ROOT" in missing.stderr
    typo = memstore(deep, "add", "x", "--root", str(tmp_path / "typo" / "path"))
    assert typo.returncode == 1 and "does not exist" in typo.stderr and typo.stderr.count("\n") == 1
    assert not (tmp_path / "typo").exists()


def test_discovery_in_a_worktree_and_a_submodule(repo: Path, tmp_path: Path) -> None:
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", str(worktree))
    (worktree / "sub" / "dir").mkdir(parents=True)
    assert (worktree / ".git").is_file()
    assert find_root(start=worktree / "sub" / "dir", environ={}) == worktree
    ok(memstore(worktree / "sub" / "dir", "add", "worktree note"))
    assert (worktree / ".teaagent" / "memory.jsonl").exists()

    library = tmp_path / "library"
    library.mkdir()
    git(library, "init", "-q")
    (library / "lib.py").write_text("x = 1\n")
    commit_all(library, "lib")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "vendor/lib")
    sub = repo / "vendor" / "lib"
    assert (sub / ".git").is_file()
    assert find_root(start=sub, environ={}) == sub  # the submodule is its own work tree
    ok(memstore(repo, "add", "superproject note"))
    # With a store at the superproject, the nearest .teaagent/ wins (DESIGN.md §9 order).
    assert find_root(start=sub, environ={}) == repo
    out = json.loads(ok(memstore(sub, "search", "superproject", "--json")))
    assert out["count"] == 1


# ----------------------------------------------------------------------------- reads without side effects

READS = [
    ["list"], ["search", "anything"], ["status"], ["health"], ["recall", "anything"], ["maintain"],
    ["doctor"], ["quarantined"], ["failures", "list"], ["failures", "match", "--task", "t"], ["pinned"],
    ["team", "list"], ["team", "prompt"], ["list", "--json"], ["health", "--json"], ["status", "--json"],
    ["recall", "x", "--json"],
]


@pytest.mark.parametrize("home_kind", ["present", "unset", "missing", "a-file"])
def test_every_read_on_an_empty_tree_changes_nothing(repo: Path, tmp_path: Path, home_kind: str) -> None:
    nested = repo / "src"
    nested.mkdir()
    home: Path | None = {
        "present": tmp_path / "home", "unset": None, "missing": tmp_path / "no-such-home",
        "a-file": tmp_path / "home-file",
    }[home_kind]
    (tmp_path / "home-file").write_text("not a folder")
    before = listing(tmp_path)
    for args in READS:
        for cwd in (repo, nested):
            result = memstore(cwd, *args, home=home)
            assert result.returncode == 0, (args, result.stderr)
            assert "Traceback" not in result.stderr
    show = memstore(repo, "show", "deadbeef", home=home)
    assert show.returncode == 1 and "not found" in show.stderr
    assert listing(tmp_path) == before


def test_reads_on_a_store_without_its_memory_folder_create_nothing_but_the_index(repo: Path) -> None:
    """A store holding only memory.jsonl (a fresh clone, say): failure and pin reads answer empty, add no folder."""
    ok(memstore(repo, "add", "one note"))
    assert not (repo / ".teaagent" / "memory").exists()

    def outside_index() -> dict[str, Any]:
        return {k: v for k, v in listing(repo).items() if not k.startswith(".teaagent/index")}

    before = outside_index()
    for args in READS:
        ok(memstore(repo, *args))
    assert outside_index() == before


def test_watch_on_an_empty_tree_creates_nothing(repo: Path, tmp_path: Path) -> None:
    before = listing(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "memstore", "watch", "--debounce-ms=20"], cwd=repo, env=base_env(tmp_path / "home"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "watching" in line
    finally:
        process.terminate()
        process.wait(timeout=60)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("home_kind", ["unset", "missing", "a-file", "read-only"])
def test_recall_answers_the_project_whatever_home_is(repo: Path, tmp_path: Path, home_kind: str) -> None:
    if home_kind == "read-only" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    ok(memstore(repo, "add", "project fact"))
    home = {"unset": None, "missing": tmp_path / "gone", "a-file": tmp_path / "f", "read-only": tmp_path / "ro"}[
        home_kind
    ]
    (tmp_path / "f").write_text("x")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    try:
        out = json.loads(ok(memstore(repo, "recall", "fact", "--json", home=home)))
        assert [entry["content"] for entry in out["project"]] == ["project fact"]
        assert out["personal"] == []
        # The library's writable hierarchy does not fail either: the personal tier is skipped or read-only.
        code = (
            "from memstore.hierarchy import MemoryHierarchy;"
            "h = MemoryHierarchy('.');"
            "print(len(h.search_all('fact')['project']))"
        )
        env = base_env(home)
        result = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True,
                                check=False, timeout=60)
        assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr
    finally:
        (tmp_path / "ro").chmod(0o700)
    assert not (tmp_path / "gone").exists()
    assert not (tmp_path / "ro" / ".config").exists()


# ----------------------------------------------------------------------------- store files


def test_first_write_creates_the_git_files_and_init_adds_them_to_an_old_store(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    TeamMemory(fresh).add("note")
    assert (fresh / ".teaagent" / ".gitattributes").read_text() == GITATTRIBUTES
    assert (fresh / ".teaagent" / ".gitignore").read_text() == GITIGNORE
    old = tmp_path / "old"
    (old / ".teaagent").mkdir(parents=True)
    (old / ".teaagent" / ".gitignore").write_text("mine\n*.lock\n")
    MemoryCatalog(old).add("x")  # the folder existed: memstore did not create it, so adds no files
    assert not (old / ".teaagent" / ".gitattributes").exists()
    ok(memstore(old, "init"))
    assert (old / ".teaagent" / ".gitattributes").read_text() == GITATTRIBUTES
    ignore = (old / ".teaagent" / ".gitignore").read_text()
    assert ignore.startswith("mine\n*.lock\n") and ignore.count("*.lock") == 1 and "/index/" in ignore
    again = json.loads(ok(memstore(old, "init", "--json")))
    assert again["written"] == []
    refused = memstore(old, "init", "--git")
    assert refused.returncode == 1 and "git" in refused.stderr


def _json_array_path_as(path: Path, kind: str, tmp_path: Path) -> Path | None:
    """Put something other than a small regular file at ``path``; returns a link's target, if any."""
    if kind == "link-to-array":
        target = tmp_path / "elsewhere.json"
        target.write_text('[{"id": "outside", "file_path": "x"}]\n')
        path.symlink_to(target)
        return target
    if kind == "link-to-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "too-large":
        with open(path, "wb") as handle:
            handle.write(b"[]")
            handle.truncate(MAX_JSON_FILE_BYTES + 1)  # sparse: costs no disk
    else:
        raise AssertionError(kind)
    return None


@pytest.mark.parametrize("kind", ["link-to-array", "link-to-dev-zero", "fifo", "too-large"])
@pytest.mark.parametrize("name", ["failures.json", "pinned.json"])
def test_json_array_file_reads_only_a_small_regular_file(tmp_path: Path, name: str, kind: str) -> None:
    """Readers see nothing and never block; a writer refuses (no copy, nothing replaced)."""
    (tmp_path / "a.txt").write_text("a")
    memory = tmp_path / ".teaagent" / "memory"
    memory.mkdir(parents=True)
    path = memory / name
    target = _json_array_path_as(path, kind, tmp_path)
    before = os.lstat(path)
    array = JsonArrayFile(path, memory / "x.lock")
    assert run_bounded(array.read) == []
    with pytest.raises(NotRegularFileError if kind != "too-large" else StorageError):
        run_bounded(array.update, lambda records: (records.append({"id": "new"}), True))
    if name == "failures.json":
        cards = FailureCardStorage(tmp_path)
        assert run_bounded(cards.list_all) == [] and run_bounded(cards.get_by_id, "outside") is None
        broken_card = FailureCard(
            id="c1", run_id="r", timestamp=1.0, error_type="E", file_path="a.txt", line_number=None,
            error_message="e", task_description="t",
        )
        with pytest.raises(StorageError):
            run_bounded(cards.append, broken_card)
    else:
        pins = PinnedFileStorage(tmp_path)
        assert run_bounded(pins.list_all) == [] and not run_bounded(pins.is_pinned, "x")
        with pytest.raises(StorageError):
            run_bounded(pins.add, "a.txt")
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode, after.st_size) == (before.st_ino, before.st_mode, before.st_size)
    assert not list(memory.glob(f"{name}.corrupt-*"))
    if target is not None:
        assert json.loads(target.read_text()) == [{"id": "outside", "file_path": "x"}]
    found = run_bounded(diagnose, tmp_path)  # doctor reads it the same way: a finding, no hang
    expected = "unreadable-file" if kind == "too-large" else "not-regular-file"
    assert (expected, f".teaagent/memory/{name}") in {(f.kind, f.file) for f in found.findings}


def test_pinned_truncation_keeps_a_copy_and_unknown_records_survive(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    pins = PinnedFileStorage(tmp_path)
    assert pins.add("a.txt")
    truncated = pins.path.read_bytes()[:30]
    pins.path.write_bytes(truncated)
    assert pins.add("b.txt")
    copies = list(pins.path.parent.glob("pinned.json.corrupt-*"))
    assert [copy.read_bytes() for copy in copies] == [truncated]
    assert [pin.file_path for pin in pins.list_all()] == ["b.txt"]
    # Elements that are not pins, and keys this version does not know, ride through every rewrite.
    stored = json.loads(pins.path.read_text())
    pins.path.write_text(json.dumps([7, {"file_path": "b.txt", "pinned_at": 1, "last_modified": 2, "x": "kept"}]))
    assert pins.add("a.txt") and pins.update_last_modified("b.txt") and pins.remove("a.txt")
    after = json.loads(pins.path.read_text())
    assert after[0] == 7 and after[1]["x"] == "kept" and after[1]["file_path"] == "b.txt" and len(after) == 2
    assert stored[0]["file_path"] == "b.txt"


# ----------------------------------------------------------------------------- merge-json


def test_merge_json_unions_by_id_and_the_newer_record_wins(tmp_path: Path) -> None:
    base = [{"id": "keep", "timestamp": 1}, {"id": "gone", "timestamp": 1}, {"id": "both", "timestamp": 1}]
    ours = [{"id": "keep", "timestamp": 1}, {"id": "both", "timestamp": 5}, {"id": "mine", "timestamp": 2}]
    theirs = [
        {"id": "keep", "timestamp": 1}, {"id": "gone", "timestamp": 1}, {"id": "both", "timestamp": 9},
        {"id": "yours", "timestamp": 3}, 7,
    ]
    paths = []
    for name, records in (("O", base), ("A", ours), ("B", theirs)):
        path = tmp_path / name
        path.write_text(json.dumps(records))
        paths.append(str(path))
    ok(memstore(tmp_path, "merge-json", *paths))
    merged = json.loads((tmp_path / "A").read_text())
    assert merged == [
        {"id": "keep", "timestamp": 1}, {"id": "both", "timestamp": 9}, {"id": "mine", "timestamp": 2},
        {"id": "yours", "timestamp": 3}, 7,
    ]
    (tmp_path / "B").write_text("[{ broken")
    failed = memstore(tmp_path, "merge-json", *paths)
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1
    assert json.loads((tmp_path / "A").read_text()) == merged  # untouched


# ----------------------------------------------------------------------------- doctor


def test_doctor_names_each_problem_with_file_and_line_and_fix_keeps_every_entry(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    first = catalog.add("first")
    catalog.add("second")
    catalog.search("first")  # build the index
    path = catalog.path
    good = path.read_bytes()
    line_one = good.split(b"\n")[0]
    path.write_bytes(good + b"not json\n\n" + line_one + b"\n" + b'{"memory_id": "torn')
    (path.parent / ".memory.jsonl.123.abc.tmp").write_bytes(b"leftover")
    failures = tmp_path / ".teaagent" / "memory" / "failures.json"
    failures.parent.mkdir()
    failures.write_text(json.dumps([card("c1").to_dict(), card("c2").to_dict()], indent=2)[:-40])

    found = json.loads(memstore(tmp_path, "doctor", "--json").stdout)
    where = {(f["kind"], f["file"], f["line"]) for f in found["findings"]}
    assert ("corrupt-line", ".teaagent/memory.jsonl", 3) in where
    assert ("blank-line", ".teaagent/memory.jsonl", 4) in where
    assert ("duplicate-id", ".teaagent/memory.jsonl", 5) in where
    assert ("torn-tail", ".teaagent/memory.jsonl", 6) in where
    assert ("stale-temp", ".teaagent/.memory.jsonl.123.abc.tmp", None) in where
    assert any(f["kind"] == "unreadable-json" and f["file"].endswith("failures.json") for f in found["findings"])
    damaged = failures.read_bytes()

    fixed = memstore(tmp_path, "doctor", "--fix")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "fixed: rewrote .teaagent/memory.jsonl" in fixed.stdout
    assert path.read_bytes() == good
    assert not (path.parent / ".memory.jsonl.123.abc.tmp").exists()
    backups = list(path.parent.glob("memory.jsonl.backup-*"))
    assert len(backups) == 1 and backups[0].read_bytes().startswith(good + b"not json")
    assert [c.id for c in FailureCardStorage(tmp_path).list_all()] == ["c1"]  # the complete element kept
    assert [p.read_bytes() for p in failures.parent.glob("failures.json.backup-*")] == [damaged]
    assert MemoryCatalog(tmp_path).show(first.memory_id) == first
    assert MemoryCatalog(tmp_path).check_index().equal


def test_maintain_apply_does_what_maintain_reports(tmp_path: Path) -> None:
    catalog = MemoryCatalog(tmp_path)
    catalog.add("one")
    good = catalog.path.read_bytes()
    catalog.path.write_bytes(good + b"\n" + good.rstrip(b"\n"))
    report = json.loads(ok(memstore(tmp_path, "maintain", "--json")))
    assert report["would_change"] and report["duplicate_ids"] == 1 and report["blank_lines"] == 1
    ok(memstore(tmp_path, "maintain", "--apply"))
    assert catalog.path.read_bytes() == good
    assert json.loads(ok(memstore(tmp_path, "maintain", "--json")))["would_change"] is False


def test_maintain_apply_answers_for_the_catalog_only(tmp_path: Path) -> None:
    """maintain --apply repairs memory.jsonl; a problem in another file is doctor's, not a failed apply."""
    catalog = MemoryCatalog(tmp_path)
    catalog.add("one")
    catalog.path.write_bytes(catalog.path.read_bytes() + b"\n")
    pins = tmp_path / ".teaagent" / "memory" / "pinned.json"
    pins.parent.mkdir()
    twice = {"file_path": "x", "pinned_at": 1, "last_modified": 1}
    pins.write_text(json.dumps([twice, twice]))
    result = memstore(tmp_path, "maintain", "--apply")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pinned.json" not in result.stdout and "could not be fixed" not in result.stderr
    assert json.loads(pins.read_text()) == [twice, twice]  # left to doctor
    assert "pinned.json" in ok(memstore(tmp_path, "doctor", "--fix"))


def test_ensure_store_adds_no_git_files_to_the_personal_folder(tmp_path: Path) -> None:
    personal = tmp_path / ".config" / "teaagent"
    ensure_store(personal, private=True)
    assert sorted(os.listdir(personal)) == []


@pytest.mark.parametrize("style", ["merge", "diff3"])
def test_doctor_merges_a_conflicted_json_array_by_id(tmp_path: Path, style: str) -> None:
    from memstore.doctor import repair

    pins = tmp_path / ".teaagent" / "memory" / "pinned.json"
    pins.parent.mkdir(parents=True)

    def pin(path: str, when: int) -> str:
        return json.dumps({"file_path": path, "pinned_at": when, "last_modified": when})

    # The common part alone ("[ a, ]") is not valid JSON: only a diff3 base section is a base.
    base = [] if style == "merge" else ["||||||| base", f"  {pin('gone.txt', 1)}"]
    text = "\n".join(
        ["[", f"  {pin('a.txt', 1)},", "<<<<<<< HEAD", f"  {pin('b.txt', 2)}", *base,
         "=======", f"  {pin('c.txt', 3)}", ">>>>>>> other", "]", ""]
    )
    pins.write_text(text)
    report = repair(tmp_path)
    assert report.healthy, report.to_dict()
    assert [p["file_path"] for p in json.loads(pins.read_text())] == ["a.txt", "b.txt", "c.txt"]
    assert [p.read_text() for p in pins.parent.glob("pinned.json.backup-*")] == [text]


# ----------------------------------------------------------------------------- hostile files (review)


@pytest.mark.parametrize("name", ["failures.json", "pinned.json"])
@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_json_array_file_that_is_a_link_or_a_pipe_is_never_followed(tmp_path: Path, name: str, kind: str) -> None:
    """A committed link must not be read through (nor block a read, for a pipe): it reads as no records,
    a write refuses to replace it, doctor reports it and copies nothing."""
    from memstore.doctor import diagnose, repair
    from memstore.errors import NotRegularFileError
    from memstore.json_array import JsonArrayFile

    outside = tmp_path / "outside.json"
    twice = {"file_path": "x.txt", "pinned_at": 1, "last_modified": 1}
    outside.write_text(json.dumps([card("leak").to_dict(), twice, twice]))
    root = tmp_path / "root"
    path = root / ".teaagent" / "memory" / name
    path.parent.mkdir(parents=True)
    if kind == "symlink":
        path.symlink_to(outside)
    else:
        os.mkfifo(path)
    array = JsonArrayFile(path, path.parent / "x.lock")
    assert array.read() == []  # as a missing or unreadable file: nothing from outside the store
    with pytest.raises(NotRegularFileError):
        array.update(lambda records: (records.append(1), True))
    found = diagnose(root).findings
    assert [(f.kind, f.file, f.fixable) for f in found] == [("not-regular-file", f".teaagent/memory/{name}", False)]
    report = repair(root)
    assert report.backups == [] and report.changes == []
    assert not list(path.parent.glob(f"{name}.backup-*"))
    assert outside.read_text() == json.dumps([card("leak").to_dict(), twice, twice])


def test_doctor_keeps_a_team_note_line_of_equals_signs_and_repeated_notes(tmp_path: Path) -> None:
    """'=======' outside a conflict is Markdown (a heading underline), and a note may repeat: neither is damage."""
    from memstore.doctor import diagnose, repair

    team = tmp_path / ".teaagent" / "team-memory.md"
    team.parent.mkdir()
    text = "- note one\nRelease checklist\n=======\n- run tests\n- run tests\n>>>>>>> not a conflict\n"
    team.write_text(text)
    assert diagnose(tmp_path).findings == []
    repair(tmp_path)
    assert team.read_text() == text
    assert list(team.parent.glob("team-memory.md.backup-*")) == []


def test_doctor_fix_of_a_conflicted_team_file_keeps_the_lines_outside_the_conflict(tmp_path: Path) -> None:
    from memstore.doctor import repair

    team = tmp_path / ".teaagent" / "team-memory.md"
    team.parent.mkdir()
    team.write_text(
        "- same\n- same\nTitle\n=======\n<<<<<<< HEAD\n- ours\n- both\n=======\n- both\n- theirs\n>>>>>>> b\n"
    )
    report = repair(tmp_path)
    assert report.healthy, report.to_dict()
    assert team.read_text() == "- same\n- same\nTitle\n=======\n- ours\n- both\n- theirs\n"


@pytest.mark.parametrize("name", [".gitattributes", ".gitignore"])
def test_init_refuses_a_git_file_that_is_a_pipe_instead_of_blocking_on_it(tmp_path: Path, name: str) -> None:
    store = tmp_path / ".teaagent"
    store.mkdir()
    os.mkfifo(store / name)
    result = memstore(tmp_path, "init")
    assert result.returncode == 1 and "not a regular file" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_doctor_salvage_never_rewrites_a_record_with_altered_text(tmp_path: Path) -> None:
    """Invalid UTF-8 ends the salvage (no U+FFFD substituted into a kept record); a raw control
    character inside a string is the same value once escaped, so that record is kept."""
    from memstore.doctor import repair

    pins = tmp_path / ".teaagent" / "memory" / "pinned.json"
    pins.parent.mkdir(parents=True)

    def pin(path: str) -> bytes:
        return json.dumps({"file_path": path, "pinned_at": 1, "last_modified": 1}).encode()

    damaged = b"[" + pin("a.txt") + b", " + pin("b\tc.txt").replace(b"\\t", b"\t") + b", "
    damaged += pin("X").replace(b"X", b"\xff") + b", " + pin("d.txt") + b"]"
    pins.write_bytes(damaged)
    report = repair(tmp_path)
    assert report.healthy, report.to_dict()
    assert [p["file_path"] for p in json.loads(pins.read_bytes())] == ["a.txt", "b\tc.txt"]
    assert [p.read_bytes() for p in pins.parent.glob("pinned.json.backup-*")] == [damaged]

    other = tmp_path / "other"
    pins = other / ".teaagent" / "memory" / "pinned.json"
    pins.parent.mkdir(parents=True)
    for bom in (b"", b"\xef\xbb\xbf"):
        pins.write_bytes(bom + b"[" + pin("a.txt") + b", " + pin("X").replace(b"X", b"\xff") + b"]")
        repair(other)
        assert [p["file_path"] for p in json.loads(pins.read_bytes())] == ["a.txt"]

"""Merge and doctor figures in a real git repository (the numbers README.md quotes).

    python -m benchmarks.git_merge --branches 3 --adds 1000 --conflict-entries 50000

1. ``--branches`` branches each add ``--adds`` entries (plus a failure card and a
   pin) from one base; they are merged into main in every order, each order from a
   fresh reset.  Reports the time of each ``git merge`` and checks that no merge
   conflicted and every entry is present once.
2. A conflicted merge made without the attributes (two sides of
   ``--conflict-entries`` entries each), then ``doctor --fix`` on it: its time and
   the sizes before and after.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memstore.doctor import repair
from memstore.failure_cards import FailureCardStorage
from memstore.jsonl import encode_entry
from memstore.layout import ensure_store, store_dir
from memstore.merge_json import register_driver
from memstore.models import MemoryEntry, new_memory_id, utc_now_iso

BIN = str(Path(sys.executable).parent)


def _env() -> dict[str, str]:
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), GIT_CONFIG_NOSYSTEM="1")
    env.update(GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x.invalid", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@x.invalid")
    return env


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, env=_env(),
                            capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {result.stderr}")
    return result


def _lines(count: int, tag: str) -> bytes:
    """``count`` catalog lines written in one go (the same bytes ``MemoryCatalog.add`` appends)."""
    return b"".join(
        encode_entry(MemoryEntry(memory_id=new_memory_id(), content=f"{tag} note {n} about merges",
                                 tags=(tag,), created_at=utc_now_iso()))
        for n in range(count)
    )


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def merges(work: Path, branches: int, adds: int) -> dict[str, object]:
    root = work / "merge"
    root.mkdir()
    git(root, "init", "-q")
    ensure_store(store_dir(root))
    register_driver(root)
    catalog = store_dir(root) / "memory.jsonl"
    _append(catalog, _lines(1, "base"))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    names = [f"b{n}" for n in range(branches)]
    for name in names:
        git(root, "checkout", "-q", "-b", name, "main")
        _append(catalog, _lines(adds, name))
        FailureCardStorage(root, use_index=False)  # the memory folder, as a first card write makes it
        cards = store_dir(root) / "memory" / "failures.json"
        records = json.loads(cards.read_text()) if cards.exists() else []
        records.append({"id": f"card-{name}", "timestamp": time.time()})
        cards.write_text(json.dumps(records, indent=2) + "\n")
        git(root, "add", "-A")
        git(root, "commit", "-qm", name)
        git(root, "checkout", "-q", "main")
    start = git(root, "rev-parse", "HEAD").stdout.strip()
    times: list[float] = []
    conflicts = 0
    orders = list(itertools.permutations(names))
    for order in orders:
        git(root, "reset", "-q", "--hard", start)
        for name in order:
            began = time.perf_counter()
            result = git(root, "merge", "-q", "--no-edit", name, check=False)
            times.append(time.perf_counter() - began)
            conflicts += result.returncode != 0
        ids = [json.loads(line)["memory_id"] for line in catalog.read_text().splitlines()]
        if len(ids) != len(set(ids)) or len(ids) != 1 + branches * adds:
            raise SystemExit(f"order {order}: {len(ids)} lines, {len(set(ids))} distinct")
    return {
        "branches": branches, "adds_per_branch": adds, "orders": len(orders), "merges": len(times),
        "conflicts": conflicts, "entries_after": 1 + branches * adds,
        "merge_seconds_median": sorted(times)[len(times) // 2], "merge_seconds_max": max(times),
    }


def doctor(work: Path, entries: int) -> dict[str, object]:
    root = work / "doctor"
    root.mkdir()
    git(root, "init", "-q")
    store = store_dir(root)
    store.mkdir()  # an old store: no .gitattributes, so the merge conflicts
    catalog = store / "memory.jsonl"
    _append(catalog, _lines(100, "base"))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    for name in ("left", "right"):
        git(root, "checkout", "-q", "-b", name, "main")
        _append(catalog, _lines(entries, name))
        git(root, "commit", "-qam", name)
        git(root, "checkout", "-q", "main")
    git(root, "merge", "-q", "--no-edit", "left")
    if git(root, "merge", "-q", "--no-edit", "right", check=False).returncode == 0:
        raise SystemExit("expected a conflict")
    size_before = catalog.stat().st_size
    began = time.perf_counter()
    report = repair(root)
    elapsed = time.perf_counter() - began
    lines = catalog.read_bytes().count(b"\n")
    if lines != 100 + 2 * entries or not report.healthy:
        raise SystemExit(f"doctor kept {lines} lines; healthy={report.healthy}")
    return {"entries_per_side": entries, "conflicted_bytes": size_before, "fixed_lines": lines,
            "doctor_fix_seconds": round(elapsed, 3), "backups": len(report.backups)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--branches", type=int, default=3)
    parser.add_argument("--adds", type=int, default=1000)
    parser.add_argument("--conflict-entries", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memstore-git-") as tmp:
        work = Path(tmp)
        print(json.dumps({"merges": merges(work, args.branches, args.adds),
                          "doctor": doctor(work, args.conflict_entries)}, indent=2))


if __name__ == "__main__":
    main()

"""Run the suite against a clean export of a commit instead of the live working tree.

Several people edit the tree at once; a run that imports a half-edited module
either crashes or measures code no commit contains.  ``--snapshot`` exports
``HEAD`` with ``git archive`` (read-only for the repository: no worktree, no index
change) and runs the suite from that copy, so published figures name the exact
commit they measured.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.measure import REPO_ROOT, python_env

SHA_ENV = "MEMSTORE_BENCH_GIT_SHA"
COMMAND_ENV = "MEMSTORE_BENCH_COMMAND"


def default_snapshot_dir() -> Path:
    """Outside the repository, so no tool run over the tree (mypy, pytest) ever sees the copy."""
    return Path(tempfile.gettempdir()) / "memstore-bench-snapshots"


def export_commit(snapshot_dir: Path, revision: str = "HEAD") -> tuple[str, Path]:
    """The commit's files under ``snapshot_dir/<sha>`` (exported once, then reused)."""
    sha = subprocess.run(
        ["git", "rev-parse", revision], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    target = snapshot_dir / sha[:12]
    if (target / ".complete").exists():
        return sha, target
    archive = subprocess.run(
        ["git", "archive", "--format=tar", sha], cwd=REPO_ROOT, capture_output=True, check=True
    )
    staging = target.with_name(f"{target.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(staging, filter="data")
    (staging / ".complete").write_text(sha + "\n")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return sha, target


def run_in_snapshot(argv: Sequence[str], *, revision: str, data_dir: Path, results_dir: Path) -> int:
    """Re-run ``python -m benchmarks.run argv`` inside an export of ``revision``; return its exit status."""
    sha, root = export_commit(default_snapshot_dir(), revision)
    env = python_env()
    env["PYTHONPATH"] = str(root)
    env[SHA_ENV] = sha
    env[COMMAND_ENV] = f"python -m benchmarks.run --snapshot {sha[:12]} " + " ".join(argv)
    command = [
        sys.executable, "-m", "benchmarks.run", *argv,
        "--data-dir", str(data_dir.resolve()),
        "--results-dir", str(results_dir.resolve()),
    ]  # fmt: skip
    print(f"running in an export of {sha[:12]} at {root}", file=sys.stderr, flush=True)
    return subprocess.run(command, cwd=root, env=env, check=False).returncode

"""The default name of a workspace's memory in a team index: ``<repository name>/memory.jsonl``.

The repository name comes from the git remote (``origin``, else the first remote),
so every clone of one repository, on any machine or CI runner, feeds the same
source; a folder outside git, or without a remote, is named after the folder.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

SUFFIX = "/memory.jsonl"
GIT_SECONDS = 5


def repository_name(remote_url: str) -> str | None:
    """``payments`` for ``git@host:team/payments.git``, ``https://host/team/payments`` and the like."""
    text = remote_url.strip().rstrip("/")
    if not text:
        return None
    last = re.split(r"[/:\\]", text)[-1]
    if last.endswith(".git"):
        last = last[: -len(".git")]
    return last or None


def _git_remote(root: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "remote", "-v"],
            capture_output=True,
            text=True,
            timeout=GIT_SECONDS,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    remotes = [line.split() for line in out.stdout.splitlines() if len(line.split()) >= 2]
    for name, url, *_ in remotes:
        if name == "origin":
            return url
    return remotes[0][1] if remotes else None


def default_source_name(root: Path) -> str:
    """The name a workspace's memory.jsonl has in a team index unless one is given."""
    remote = _git_remote(root)
    name = repository_name(remote) if remote else None
    return (name or Path(root).resolve().name or "memory") + SUFFIX

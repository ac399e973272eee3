"""Team memory: shared, human-readable notes in ``<root>/.teaagent/team-memory.md``.

One entry is one line, ``- <created_at> — <text>``, appended under
``<root>/.teaagent/team-memory.lock`` and never rewritten.  Because the format is
one line per entry, line breaks inside an entry (``\\n``, ``\\r``, and the other
separators ``str.splitlines`` knows) are collapsed: each line is stripped and the
non-empty ones are joined with single spaces.  Reading splits on ``\n``, ``\r\n``
and a lone ``\r`` (files saved by other editors) and drops a leading UTF-8 BOM.
"""

from __future__ import annotations

import builtins
import re
from pathlib import Path

from memstore.checks import check_limit, require_str
from memstore.errors import EmptyContentError, EntryNotFoundError, InvalidArgumentError
from memstore.files import FileLock, atomic_write, read_regular_file
from memstore.group_commit import GroupCommit
from memstore.layout import TEAM_FILE, TEAM_LOCK, ensure_store, store_dir
from memstore.models import utc_now_iso

EMPTY_PROMPT = "[team-memory] No shared team context available."
CHARS_PER_TOKEN = 4
LINE_BREAK = re.compile("\r\n|\r|\n")
MAX_TEAM_MEMORY_BYTES = 64 * 1024 * 1024
"""A larger team-memory.md (or anything but a regular file there) is a StorageError, not a read without end."""


def one_line(text: str) -> str:
    """Collapse every line break so the entry stays a single line of the file."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


class TeamMemory:
    """Append-only shared notes of one repository root."""

    def __init__(self, root: str | Path = ".") -> None:
        self.root = Path(root)
        self.directory = store_dir(self.root)
        self.path = self.directory / TEAM_FILE
        self._lock = FileLock(self.directory / TEAM_LOCK)
        self._commit = GroupCommit(self.path)

    def add(self, entry: str) -> str:
        """Append one entry and return the written line (without its newline)."""
        text = one_line(require_str("entry", entry))
        if not text:
            raise EmptyContentError("team memory entry cannot be empty")
        line = f"- {utc_now_iso()} — {text}"
        ensure_store(self.directory)
        with self._lock:
            pending = self._commit.append(line.encode("utf-8") + b"\n")
        with pending:  # durable outside the lock: one fsync covers the notes queued behind it
            pending.commit()
        return line

    def list(self) -> builtins.list[str]:
        """Every line with text, without its line ending, oldest first; ``[]`` when there is no file.

        Lines end at ``\n``, ``\r\n`` or a lone ``\r``; lines of only whitespace are skipped.
        """
        try:
            data = read_regular_file(self.path, max_bytes=MAX_TEAM_MEMORY_BYTES)
        except FileNotFoundError:
            return []
        text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
        return [line for line in LINE_BREAK.split(text) if line.strip()]

    def remove(self, text: str, *, every: bool = False) -> builtins.list[str]:
        """Remove the note whose line contains ``text``; returns the removed lines.

        The file is append-only for writers, so a removal is the one rewrite: under the
        team lock (appends wait), the file is replaced atomically with every other line
        kept byte for byte.  More than one matching note is refused (InvalidArgumentError
        listing them) unless ``every``; none is EntryNotFoundError.
        """
        if not require_str("text", text).strip():
            raise InvalidArgumentError("the text naming a team note cannot be empty")
        with self._lock:
            try:
                data = read_regular_file(self.path, max_bytes=MAX_TEAM_MEMORY_BYTES)
            except FileNotFoundError:
                raise EntryNotFoundError(f"no team note contains {text!r}") from None
            # Split as list() does (LF, CRLF or a lone CR), keeping each line's own ending.
            raw_lines = re.findall(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", data)
            shown = [raw.decode("utf-8", errors="replace").removeprefix("\ufeff").rstrip("\r\n") for raw in raw_lines]
            hits = [i for i, line in enumerate(shown) if line.strip() and text in line]
            if not hits:
                raise EntryNotFoundError(f"no team note contains {text!r}")
            if len(hits) > 1 and not every:
                listed = "; ".join(shown[i] for i in hits[:10])
                raise InvalidArgumentError(f"{len(hits)} team notes contain {text!r} (use --all): {listed}")
            gone = set(hits)
            atomic_write(self.path, b"".join(raw for i, raw in enumerate(raw_lines) if i not in gone))
        return [shown[i] for i in hits]

    def inject_prompt(self, limit_tokens: int = 2048) -> str:
        """A prompt block of the newest entries that fit, printed oldest first.

        The budget is ``limit_tokens * 4`` characters for the entry lines joined by
        newlines (the header is not counted).  Entries are taken newest first and the
        walk stops at the first one that does not fit, so what is shown is always a
        contiguous run of the newest entries.  ``<n>`` in the header counts the
        entries shown; when even the newest does not fit it is 0 and only the header
        is returned.
        """
        budget = check_limit(limit_tokens, name="limit_tokens") * CHARS_PER_TOKEN
        lines = self.list()
        if not lines:
            return EMPTY_PROMPT
        chosen: builtins.list[str] = []
        used = 0
        for line in reversed(lines):
            cost = len(line) + (1 if chosen else 0)
            if used + cost > budget:
                break
            chosen.append(line)
            used += cost
        chosen.reverse()
        header = f"[team-memory] Shared team context ({len(chosen)} entries):"
        return "\n".join([header, *chosen])

"""How the command prints: tables that fit the terminal, JSON, JSON lines and CSV.

Widths are display columns (wcwidth), not code points, so CJK and emoji line up.
Tables are fitted to the terminal only when stdout is one; piped output is never
truncated.  Imported by the CLI only.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

FORMATS = ("table", "json", "jsonl", "csv")
ELLIPSIS = "…"
GAP = "  "
MIN_FLEX = 10


def char_width(ch: str) -> int:
    if " " <= ch <= "~" or ch == ELLIPSIS:
        return 1
    # Loaded only for other text: importing wcwidth costs more than the rest of printing a table.
    from wcwidth import wcwidth

    return max(wcwidth(ch), 0)


def display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal (control and unknown characters count as zero)."""
    if text.isascii() and text.isprintable():
        return len(text)
    return sum(char_width(ch) for ch in text)


def clip(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` columns, ending in an ellipsis when cut."""
    if display_width(text) <= width:
        return text
    if width <= 0:
        return ""
    out: list[str] = []
    used = 0
    for ch in text:
        w = char_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def pad(text: str, width: int) -> str:
    return text + " " * max(width - display_width(text), 0)


def one_line(text: str, width: int | None = None) -> str:
    """Text for a table cell: whitespace collapsed, unprintables shown as '?', optionally clipped."""
    flat = "".join(ch if ch.isprintable() else "?" for ch in " ".join(text.split()))
    return flat if width is None else clip(flat, width)


def terminal_width() -> int | None:
    """The terminal's width when stdout is a terminal; None (do not truncate) when piped."""
    try:
        if not sys.stdout.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    import shutil  # only for a terminal: shutil brings bz2, lzma and fnmatch to every search

    return shutil.get_terminal_size().columns


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, flex: int = -1, width: int | None = None) -> str:
    """Columns padded to their widest cell; with ``width``, the ``flex`` column is cut so lines fit."""
    body = [list(row) for row in rows]
    count = len(headers)
    flex %= count
    # An unbounded table prints its last column as it is (content beyond ASCII then never
    # needs wcwidth); a bounded one needs every width to know how much room the cut column has.
    measured = set(range(count - 1)) if width is None else set(range(count))
    widths = [
        max([display_width(headers[i])] + [display_width(row[i]) for row in body]) if i in measured else 0
        for i in range(count)
    ]
    if width is not None:
        others = sum(w for i, w in enumerate(widths) if i != flex) + len(GAP) * (count - 1)
        widths[flex] = max(min(widths[flex], width - others), MIN_FLEX)

    def line(cells: Sequence[str]) -> str:
        fitted = [clip(cell, widths[i]) if i == flex and width is not None else cell for i, cell in enumerate(cells)]
        padded = [pad(cell, widths[i]) for i, cell in enumerate(fitted[:-1])]
        text = GAP.join([*padded, fitted[-1]]).rstrip()
        return clip(text, width) if width is not None else text

    return "\n".join([line(headers)] + [line(row) for row in body])


def jsonl_text(records: Iterable[Mapping[str, Any]]) -> str:
    """One line per record, each the same JSON as ``--json`` writes (memstore.reports.json_text)."""
    from memstore.reports import json_text

    return "\n".join(json_text(record, indent=None) for record in records)


def _csv_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_csv_cell(item) for item in value)
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return str(value).encode("utf-8", "replace").decode("utf-8")


def csv_text(records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A header row and one row per record; lists joined by commas, objects as JSON."""
    names = list(columns) if columns is not None else list(dict.fromkeys(key for r in records for key in r))
    import csv  # only --format csv needs it

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    for record in records:
        writer.writerow([_csv_cell(record.get(name)) for name in names])
    return buffer.getvalue().rstrip("\n")

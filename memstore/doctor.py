"""Doctor: find what git, editors and crashes leave in a store, and repair it without losing entries.

:func:`diagnose` only reads (a root without a store has nothing to report).
:func:`repair` fixes each file under that file's own lock: it keeps a
``<name>.backup-<ns>`` copy of the original bytes, then rewrites the file
atomically.  Every valid entry is kept; a conflicted merge of a line file becomes
the union of both sides (conflict markers and the base section dropped, exact
duplicates kept once), and a conflicted JSON array is merged by id as
``memstore merge-json`` would have done.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memstore.errors import IndexUnavailableError, NotRegularFileError
from memstore.files import (
    MAX_JSON_FILE_BYTES,
    FileLock,
    atomic_write,
    iter_raw_lines,
    open_for_read,
    read_regular_file,
    temp_in_use,
)
from memstore.index.report import IndexOff
from memstore.json_array import encode_array, parse_array
from memstore.jsonl import encode_entry, is_blank, parse_json_bytes
from memstore.layout import (
    CATALOG_FILE,
    CATALOG_LOCK,
    FAILURES_FILE,
    FAILURES_LOCK,
    MEMORY_DIRNAME,
    PINNED_FILE,
    PINNED_LOCK,
    QUARANTINE_FILE,
    STORE_DIRNAME,
    TEAM_FILE,
    TEAM_LOCK,
    has_store,
    store_dir,
)
from memstore.logger import LazyLogger
from memstore.merge_json import merge_arrays, record_key
from memstore.models import memory_entry_from_payload

log = LazyLogger(__name__)

MARKERS = (b"<<<<<<< ", b"||||||| ", b">>>>>>> ")
SEPARATOR = b"======="
INDEX_NAME = f"{STORE_DIRNAME}/index"


@dataclass
class Finding:
    """One problem: what, where (file, 1-based line when it has one), and whether --fix repairs it."""

    kind: str
    file: str
    line: int | None
    detail: str
    fixable: bool = True
    severity: str = "error"
    """``error``, or ``info`` for what reads handle by themselves (an index that is behind)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "file": self.file,
            "line": self.line,
            "detail": self.detail,
            "fixable": self.fixable,
            "severity": self.severity,
        }


@dataclass
class DoctorReport:
    """What doctor found (and, after ``repair``, what it changed and what is left)."""

    root: str
    findings: list[Finding] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """No finding of severity ``error`` (an index that is merely behind is fine)."""
        return not any(finding.severity == "error" for finding in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "healthy": self.healthy,
            "findings": [finding.to_dict() for finding in self.findings],
            "changes": list(self.changes),
            "backups": list(self.backups),
        }


# ----------------------------------------------------------------------------- line files


def _marker(data: bytes, section: str) -> str | None:
    """Which section a marker line opens, or None for an ordinary line.

    A marker counts only where git would write it: ``<<<<<<<`` outside a conflict,
    ``|||||||`` after it, ``=======`` after either, ``>>>>>>>`` after ``=======``.
    Elsewhere such a line is text (``=======`` underlines a Markdown heading).
    """
    if section == "common" and _opens(data, b"<<<<<<<"):
        return "ours"
    if section == "ours" and _opens(data, b"|||||||"):
        return "base"
    if section in ("ours", "base") and data == SEPARATOR:
        return "theirs"
    if section == "theirs" and _opens(data, b">>>>>>>"):
        return "end"
    return None


def _opens(data: bytes, marker: bytes) -> bool:
    return data.startswith(marker) and (len(data) == 7 or data[7:8] == b" ")


@dataclass
class _Line:
    number: int
    data: bytes | None
    terminated: bool
    section: str  # "common", "ours", "base" or "theirs"
    marker: bool


def _lines(path: Path) -> Iterator[_Line]:
    fd = open_for_read(path)
    if fd is None:
        return
    try:
        section = "common"
        for number, raw in enumerate(iter_raw_lines(fd), start=1):
            data = raw.data.rstrip(b"\r") if raw.data is not None else None
            side = _marker(data, section) if data is not None else None
            if side is not None:
                section = "common" if side == "end" else side
                yield _Line(number, raw.data, raw.terminated, section, True)
                continue
            yield _Line(number, raw.data, raw.terminated, section, False)
    finally:
        os.close(fd)


def _entry_keys(path: Path) -> dict[str, set[bytes]]:
    """The valid entries of a JSONL catalog file by id, each as its canonical line without extra
    fields (none for a missing or non-regular file), as the file is once --fix is done with it."""
    keys: dict[str, set[bytes]] = {}
    closed_bases: set[int] | None = None
    try:
        for line in _lines(path):
            if line.marker or line.data is None or is_blank(line.data):
                continue
            if line.section == "base":  # a closed conflict's base is dropped by the same --fix
                if closed_bases is None:
                    closed_bases = _closed_bases(path)
                if line.number in closed_bases:
                    continue
            try:
                entry = memory_entry_from_payload(parse_json_bytes(line.data))
            except ValueError:
                continue
            if entry is not None:
                keys.setdefault(entry.memory_id, set()).add(encode_entry(entry))
    except NotRegularFileError:
        return {}
    return keys


def _closed_bases(path: Path) -> set[int]:
    """The numbers of the lines in base sections of conflicts that close (``>>>>>>>`` follows).

    Only those are the merge base: after a ``|||||||`` that no end follows (a file cut short,
    or edited by hand) the lines are entries every reader reads.
    """
    closed: set[int] = set()
    pending: list[int] = []
    for line in _lines(path):
        if line.marker and line.section == "common":  # the end of a conflict
            closed.update(pending)
            pending = []
        elif line.section == "base" and not line.marker:
            pending.append(line.number)
    return closed


def _check_catalog_file(
    path: Path, name: str, report: list[Finding], *, quarantine: Path | None = None, records: bool = False
) -> list[bytes] | None:
    """Findings for a JSONL catalog file; returns the repaired content's lines (None when nothing to fix).

    With ``quarantine`` (memory.jsonl), an entry the quarantine file also holds (the same
    fields) is one a union merge brought back next to the other side's append: it leaves
    memory.jsonl.  One that only shares its id was edited since: it stays, reported.
    With ``records`` (the quarantine file), a second record of one move (the entry, reason
    and branch all the same, only the time differs: a call tried again once recorded its
    entries again) is a duplicate the first one stands for.
    """
    quarantined = _entry_keys(quarantine) if quarantine is not None else {}
    closed_bases: set[int] | None = None  # read when a base section first shows up
    kept: list[bytes] = []
    first_line: dict[str, tuple[int, bytes]] = {}
    change = False
    last: _Line | None = None
    for line in _lines(path):
        last = line
        if line.marker:
            report.append(Finding("conflict-marker", name, line.number, "git conflict marker line"))
            change = True
            continue
        if line.section == "base" and not line.marker:
            if closed_bases is None:
                closed_bases = _closed_bases(path)
            if line.number in closed_bases:
                report.append(Finding("conflict-base", name, line.number, "line of the merge base inside a conflict"))
                change = True
                continue
        if line.data is None:
            report.append(Finding("corrupt-line", name, line.number, "line longer than the limit"))
            change = True
            continue
        if is_blank(line.data):
            report.append(Finding("blank-line", name, line.number, "blank line"))
            change = True
            continue
        try:
            payload = parse_json_bytes(line.data)
        except ValueError:
            payload = None
        entry = memory_entry_from_payload(payload) if payload is not None else None
        if entry is None:
            kind = "torn-tail" if not line.terminated else "corrupt-line"
            detail = "last line cut short (no newline)" if kind == "torn-tail" else "not a valid entry"
            report.append(Finding(kind, name, line.number, detail))
            change = True
            continue
        held = quarantined.get(entry.memory_id)
        if held is not None and encode_entry(entry) in held:
            detail = f"id {entry.memory_id} is also quarantined (a merge brought it back)"
            report.append(Finding("quarantined-entry", name, line.number, detail))
            change = True
            continue
        if held is not None:  # edited after the quarantined copy was taken: the quarantine does not hold it
            detail = f"id {entry.memory_id} is also quarantined, with other fields (kept)"
            report.append(Finding("quarantined-entry", name, line.number, detail, fixable=False))
        seen = first_line.get(entry.memory_id)
        if seen is not None:
            same = _same_values(seen[1], line.data)  # the whole record, quarantine provenance included
            again = not same and records and _same_values(seen[1], line.data, untimed=True)
            kind = " (identical)" if same else " (the same move, recorded again later)" if again else " (different)"
            report.append(
                Finding(
                    "duplicate-id",
                    name,
                    line.number,
                    f"id {entry.memory_id} also on line {seen[0]}{kind}",
                    fixable=same or again,
                )
            )
            same = same or again
            if same:
                change = True
                continue
        else:
            first_line[entry.memory_id] = (line.number, line.data)
        kept.append(line.data)
    if last is not None and not last.terminated and not change:
        report.append(Finding("missing-newline", name, last.number, "file does not end with a newline"))
        change = True
    return kept if change else None


def _same_values(first: bytes, second: bytes, *, untimed: bool = False) -> bool:
    """Whether two lines hold the same value as readers show it (without ``quarantined_at``: ``untimed``).

    Compared as the exact parse spelled one way: Python's ``==`` holds ``true``, ``1`` and
    ``1.0`` equal, and orjson reads integers past 64 bits as floats, so two records that
    say different things were once one record to drop.  A value too deep to compare is kept.
    """
    try:
        values = [parse_json_bytes(data, exact=True) for data in (first, second)]
        if untimed:
            values = [_untimed(value) for value in values]
        return json.dumps(values[0], sort_keys=True) == json.dumps(values[1], sort_keys=True)
    except (ValueError, RecursionError):
        return False


def _untimed(payload: Any) -> Any:
    """A quarantine record without the time it was made."""
    if not isinstance(payload, dict) or not isinstance(payload.get("provenance"), dict):
        return payload
    provenance = {key: value for key, value in payload["provenance"].items() if key != "quarantined_at"}
    return {**payload, "provenance": provenance}


def _check_team_file(path: Path, name: str, report: list[Finding]) -> list[bytes] | None:
    """Team notes are free text: only conflict markers (and the base section) are removed.

    A note both sides of one conflict added is kept once; notes that repeat elsewhere
    are the team's own text and stay.
    """
    kept: list[bytes] = []
    change = False
    ours: set[bytes] = set()
    closed_bases: set[int] | None = None  # read when a base section first shows up
    for line in _lines(path):
        if line.section == "base" and not line.marker and closed_bases is None:
            closed_bases = _closed_bases(path)
        if line.marker or (line.section == "base" and closed_bases is not None and line.number in closed_bases):
            kind = "conflict-marker" if line.marker else "conflict-base"
            report.append(Finding(kind, name, line.number, "git conflict marker line"))
            change = True
            if line.marker and line.section == "ours":
                ours = set()
            continue
        if line.data is None:
            continue
        if line.section == "ours":
            ours.add(line.data)
        elif line.section == "theirs" and line.data.strip() and line.data in ours:
            continue
        kept.append(line.data)
    return kept if change else None


# ----------------------------------------------------------------------------- JSON arrays


def _conflict_sides(data: bytes) -> tuple[bytes | None, bytes, bytes, list[int]] | None:
    """(base, ours, theirs) texts of a file holding git conflict markers, and the markers' line numbers.

    None when it has none.  The base is None unless the conflict carries its own base section (diff3 style):
    the common lines alone are not the merge base.
    """
    sides: dict[str, list[bytes]] = {"base": [], "ours": [], "theirs": []}
    section = "common"
    markers: list[int] = []
    has_base = False
    for number, raw in enumerate(data.split(b"\n"), start=1):
        side = _marker(raw.rstrip(b"\r"), section)
        if side is not None:
            markers.append(number)
            has_base = has_base or side == "base"
            section = "common" if side == "end" else side
            continue
        targets = ("base", "ours", "theirs") if section == "common" else (section,)
        for target in targets:
            sides[target].append(raw)
    if not markers:
        return None
    base = b"\n".join(sides["base"]) if has_base else None
    return base, b"\n".join(sides["ours"]), b"\n".join(sides["theirs"]), markers


def salvage_array(data: bytes) -> list[Any]:
    """The complete elements at the start of a damaged JSON array (a truncated file, say).

    Salvage stops at the first byte that is not UTF-8 rather than keep a record with
    a substituted character; a raw control character inside a string is accepted (its
    value survives, escaped, in the rewrite).
    """
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data[: exc.start].decode("utf-8")
    decoder = json.JSONDecoder(strict=False)
    pos = _skip(text, 0)
    if not text.startswith("[", pos):
        return []
    pos = _skip(text, pos + 1)
    out: list[Any] = []
    while pos < len(text):
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            break
        out.append(value)
        pos = _skip(text, end)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        else:
            break
    return out


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _check_array_file(path: Path, name: str, report: list[Finding]) -> list[Any] | None:
    """Findings for failures.json or pinned.json; returns the repaired records (None when nothing to fix)."""
    try:
        data = read_regular_file(path, max_bytes=MAX_JSON_FILE_BYTES)  # never through a link, never blocking
    except FileNotFoundError:
        return None
    except NotRegularFileError:
        raise
    except OSError as exc:
        report.append(Finding("unreadable-file", name, None, str(exc.strerror or exc), fixable=False))
        return None
    if data is None or not data.strip():
        return None
    records = parse_array(data)
    if records is None:
        sides = _conflict_sides(data)
        if sides is not None:
            base_text, ours_text, theirs_text, marker_lines = sides
            for number in marker_lines:
                report.append(Finding("conflict-marker", name, number, "git conflict marker line"))
            ours = parse_array(ours_text) if ours_text.strip() else []
            theirs = parse_array(theirs_text) if theirs_text.strip() else []
            if ours is None or theirs is None:
                detail = "a side of the conflict is not a JSON array"
                report.append(Finding("unreadable-json", name, None, detail, fixable=False))
                return None
            # Without a readable base nothing counts as deleted: the union of both sides.
            base = parse_array(base_text) if base_text is not None else None
            return merge_arrays(base or [], ours, theirs)
        line = _json_error_line(data)
        salvaged = salvage_array(data)
        report.append(
            Finding(
                "unreadable-json",
                name,
                line,
                f"not a JSON array; {len(salvaged)} complete element(s) can be recovered",
            )
        )
        return salvaged
    keys: dict[str, int] = {}
    duplicate = False
    deduped: list[Any] = []
    for position, record in enumerate(records):
        key = record_key(record)
        if key in keys:
            same = records[keys[key]] == record
            report.append(
                Finding(
                    "duplicate-id",
                    name,
                    None,
                    f"element {position + 1} repeats element {keys[key] + 1}" + (" (identical)" if same else ""),
                    fixable=same,
                )
            )
            if same:
                duplicate = True
                continue
        else:
            keys[key] = position
        deduped.append(record)
    return deduped if duplicate else None


def _json_error_line(data: bytes) -> int | None:
    try:
        json.loads(data.decode("utf-8-sig"))
    except json.JSONDecodeError as exc:
        return exc.lineno
    except (ValueError, RecursionError):
        return None
    return None


# ----------------------------------------------------------------------------- the workspace


@dataclass
class _Target:
    path: Path
    lock: Path
    check: Callable[[Path, str, list[Finding]], Any]
    encode: Callable[[Any], bytes]

    def run_check(self, findings: list[Finding]) -> Any:
        """The check's repaired content; a link or special file at the path is reported, never read."""
        try:
            return self.check(self.path, self.name, findings)
        except NotRegularFileError:
            detail = "not a regular file (a link or special file): memstore neither follows nor replaces it"
            findings.append(Finding("not-regular-file", self.name, None, detail, fixable=False))
            return None

    @property
    def name(self) -> str:
        """The file's path from the root, as findings name it."""
        parent = self.path.parent
        folder = STORE_DIRNAME if parent.name == STORE_DIRNAME else f"{STORE_DIRNAME}/{parent.name}"
        return f"{folder}/{self.path.name}"


def _lines_bytes(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def _targets(root: Path) -> list[_Target]:
    store = store_dir(root)
    memory = store / MEMORY_DIRNAME
    memory_lock = store / CATALOG_LOCK
    return [
        _Target(
            store / CATALOG_FILE,
            memory_lock,
            functools.partial(_check_catalog_file, quarantine=store / QUARANTINE_FILE),
            _lines_bytes,
        ),
        _Target(
            store / QUARANTINE_FILE, memory_lock, functools.partial(_check_catalog_file, records=True), _lines_bytes
        ),
        _Target(store / TEAM_FILE, store / TEAM_LOCK, _check_team_file, _lines_bytes),
        _Target(memory / FAILURES_FILE, memory / FAILURES_LOCK, _check_array_file, encode_array),
        _Target(memory / PINNED_FILE, memory / PINNED_LOCK, _check_array_file, encode_array),
    ]


def _temp_files(target: _Target) -> list[Path]:
    prefix = f".{target.path.name}."
    try:
        names = os.listdir(target.path.parent)
    except OSError:
        return []
    found = (target.path.parent / name for name in names if name.startswith(prefix) and name.endswith(".tmp"))
    return sorted(temp for temp in found if not temp_in_use(temp))  # a live rewrite holds its own


def _index_findings(root: Path, report: list[Finding]) -> None:
    from memstore.catalog import MemoryCatalog

    catalog = MemoryCatalog(root, readonly=True)
    if not catalog.path.exists() or not (store_dir(root) / "index").is_dir():
        return
    index = catalog.health().index
    name = INDEX_NAME
    if isinstance(index, IndexOff) and index.state == "unavailable":
        report.append(Finding("damaged-index", name, None, index.error or "cannot be opened"))
    elif index.state in ("behind", "not indexed", "old schema"):
        detail = f"index is {index.state} (reads catch it up)"
        if index.state == "old schema":
            detail = "index has an older schema (migrated on the next use by a handle that may write)"
        report.append(Finding("stale-index", name, None, detail, severity="info"))


def diagnose(root: str | os.PathLike[str]) -> DoctorReport:
    """Every problem doctor knows, each with file and line; reads only."""
    base = Path(root)
    report = DoctorReport(root=str(base))
    if not has_store(base):
        return report
    for target in _targets(base):
        for temp in _temp_files(target):
            detail = "temp file of an unfinished rewrite"
            report.findings.append(Finding("stale-temp", _relative(base, temp), None, detail))
        target.run_check(report.findings)
    _index_findings(base, report.findings)
    return report


def repair(root: str | os.PathLike[str], *, catalog_only: bool = False) -> DoctorReport:
    """Fix what :func:`diagnose` finds; the report lists changes, backups and what is left.

    ``catalog_only`` limits the repair to memory.jsonl (``memstore maintain --apply``).
    """
    base = Path(root)
    report = DoctorReport(root=str(base))
    if not has_store(base):
        return report
    targets = _targets(base)[:1] if catalog_only else _targets(base)
    for target in targets:
        if not target.path.parent.is_dir():
            continue
        with FileLock(target.lock):
            for temp in _temp_files(target):
                try:
                    temp.unlink()
                    report.changes.append(f"removed stale temp file {_relative(base, temp)}")
                except OSError as exc:
                    log.warning("cannot remove %s: %s", temp, exc)
            found: list[Finding] = []
            repaired = target.run_check(found)
            if repaired is None:
                continue
            try:
                original = read_regular_file(target.path, max_bytes=sys.maxsize)  # the backup holds every byte
            except FileNotFoundError:
                original = b""
            backup = target.path.with_name(f"{target.path.name}.backup-{time.time_ns()}")
            atomic_write(backup, original)
            atomic_write(target.path, target.encode(repaired))
            report.backups.append(_relative(base, backup))
            kinds = sorted({finding.kind for finding in found if finding.fixable})
            report.changes.append(f"rewrote {target.name} ({', '.join(kinds)}); original kept in {backup.name}")
    _repair_index(base, report)
    findings = diagnose(base).findings
    if catalog_only:
        # maintain answers for the catalog (and its index); other files are doctor's to report.
        names = {target.name for target in targets}
        findings = [finding for finding in findings if finding.file in names or finding.file == INDEX_NAME]
    report.findings = findings
    return report


def _repair_index(root: Path, report: DoctorReport) -> None:
    from memstore.catalog import MemoryCatalog

    catalog_path = store_dir(root) / CATALOG_FILE
    if not catalog_path.exists() or not (store_dir(root) / "index").is_dir():
        return
    catalog = MemoryCatalog(root)
    try:
        catalog.reindex()
        if not catalog.check_index().equal:
            catalog.reindex(full=True)
            report.changes.append("rebuilt the index (it differed from the files)")
    except IndexUnavailableError as exc:
        try:
            catalog.reindex(full=True)
            report.changes.append(f"rebuilt the index ({exc})")
        except IndexUnavailableError as again:
            log.warning("the index cannot be rebuilt: %s", again)


def _relative(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)

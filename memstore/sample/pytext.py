"""Real prose from installed Python source: its docstrings and comments, read without importing it.

The real-text corpus (:mod:`memstore.sample.realtext`) is built from text nobody on this
project wrote and every machine with Python 3.11+ has: the standard library of the running
interpreter, optionally plus its site-packages.  Files are parsed with :mod:`ast`
(docstrings) and :mod:`tokenize` (comments), never imported, so extraction runs no third-party
code.  A fingerprint of the extracted text, recorded with every dataset, says whether two
runs measured the same words.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import multiprocessing
import os
import re
import sys
import sysconfig
import tokenize
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

EXTRACTOR_VERSION = 1
"""Bump when the extracted text changes for the same files, so cached extractions are not reused."""

SOURCES = ("stdlib", "site-packages")
SKIPPED_DIRS = frozenset({"__pycache__", "site-packages", "dist-packages", "test", "tests", "idle_test"})
"""Test suites (absent from many installs, full of fixtures rather than prose) and nested installs."""
SKIPPED_PREFIXES = ("__editable__", "_distutils_hack")
"""site-packages files that installers write per machine (editable finders name local paths)."""
KINDS = ("docstring", "comment")
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_CODING = re.compile(r"^#.*coding[:=]")
_TABLE_ROW = re.compile(r"0x[0-9A-Fa-f]+\s|[^a-z]*$")
TABLE_MIN_LINES, TABLE_SHARE = 16, 0.9
"""A long comment block of hex codes and upper-case names is a generated table (the codecs' maps):
dropped, or a fifth of the stdlib's text would be ``LATIN CAPITAL LETTER``."""


@dataclass(frozen=True)
class SourceFile:
    """The text units of one Python file, in source order: (kind, text) with kind in KINDS."""

    source: str
    module: str
    units: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TextCorpus:
    """Extracted text of every selected file, and what it came from."""

    files: tuple[SourceFile, ...]
    sources: tuple[dict[str, object], ...]
    fingerprint: str

    def describe(self) -> dict[str, object]:
        """The metadata a dataset records so that runs can be compared."""
        units = [unit for item in self.files for unit in item.units]
        return {
            "fingerprint": self.fingerprint,
            "extractor_version": EXTRACTOR_VERSION,
            "python": sys.version.split()[0],
            "sources": list(self.sources),
            "files_with_text": len(self.files),
            "units": {kind: sum(1 for k, _ in units if k == kind) for kind in KINDS},
            "chars": {kind: sum(len(text) for k, text in units if k == kind) for kind in KINDS},
        }


def source_root(name: str) -> Path:
    """Where a named source lives for the running interpreter."""
    paths = sysconfig.get_paths()
    if name == "stdlib":
        return Path(paths["stdlib"])
    if name == "site-packages":
        return Path(paths["purelib"])
    raise ValueError(f"unknown text source {name!r} (choose from {', '.join(SOURCES)})")


def python_files(root: Path, *, packages: Iterable[str] | None = None) -> list[str]:
    """Relative POSIX paths of the .py files under ``root``, sorted, minus tests and nested installs.

    ``packages`` keeps only files whose top-level module name is listed (tests use a few
    small packages to stay fast).
    """
    wanted = None if packages is None else set(packages)
    found: list[str] = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(
            name for name in subdirs if name not in SKIPPED_DIRS and not name.endswith((".dist-info", ".egg-info"))
        )
        for name in names:
            if not name.endswith(".py") or name.startswith(SKIPPED_PREFIXES):
                continue
            relative = Path(directory, name).relative_to(root).as_posix()
            top = relative.split("/", 1)[0].removesuffix(".py")
            if top.startswith(SKIPPED_PREFIXES) or (wanted is not None and top not in wanted):
                continue
            found.append(relative)
    return sorted(found)


def module_name(relative: str) -> str:
    """``email/mime/text.py`` -> ``email.mime.text``; a package's ``__init__.py`` names the package."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _docstrings(tree: ast.Module) -> list[tuple[int, str, str]]:
    """Docstrings of the module and of every class and function, at any depth.

    Only statement lists are walked (docstrings cannot hide in expressions), which is
    several times faster than ``ast.walk`` over every node.
    """
    found = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, _DOC_NODES) and node.body:
            text = ast.get_docstring(node, clean=True)
            if text:
                found.append((node.body[0].lineno, "docstring", text))
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, name, None)
            if isinstance(children, list):
                pending.extend(child for child in children if isinstance(child, ast.AST))
    return found


def _comment_blocks(data: bytes) -> list[tuple[int, str, str]]:
    """Comments grouped into blocks of consecutive lines (shebang and coding lines dropped)."""
    blocks: list[tuple[int, str, str]] = []
    lines: list[str] = []
    first = last = 0
    for token in tokenize.tokenize(io.BytesIO(data).readline):
        if token.type != tokenize.COMMENT:
            continue
        row = token.start[0]
        if row <= 2 and (token.string.startswith("#!") or _CODING.match(token.string)):
            continue
        text = token.string.lstrip("#").strip()
        if not text:
            continue
        if lines and row != last + 1:
            blocks.append((first, "comment", "\n".join(lines)))
            lines = []
        if not lines:
            first = row
        lines.append(text)
        last = row
    if lines:
        blocks.append((first, "comment", "\n".join(lines)))
    return blocks


def _is_table(lines: Sequence[str]) -> bool:
    if len(lines) < TABLE_MIN_LINES:
        return False
    return sum(1 for line in lines if _TABLE_ROW.match(line)) >= TABLE_SHARE * len(lines)


def extract_units(data: bytes) -> list[tuple[str, str]]:
    """Docstrings and comment blocks of one file's bytes, in line order; [] if it does not parse."""
    try:
        found = _docstrings(ast.parse(data)) + _comment_blocks(data)
    except (SyntaxError, ValueError, tokenize.TokenError, UnicodeDecodeError):
        return []
    found.sort(key=lambda item: (item[0], item[1]))
    units = []
    for _, kind, text in found:
        lines = [stripped for line in text.splitlines() if (stripped := line.strip())]
        if kind == "comment" and _is_table(lines):
            continue
        if lines:
            units.append((kind, "\n".join(lines)))
    return units


def _extract_path(path: str) -> list[tuple[str, str]]:
    try:
        data = Path(path).read_bytes()
    except OSError:
        return []
    return extract_units(data)


def _listing_key(listing: Sequence[tuple[str, Path, list[str]]]) -> str:
    """A cheap key for the cache of extracted text: every file's path, size and mtime."""
    digest = hashlib.sha256(f"extractor {EXTRACTOR_VERSION}\n".encode())
    for name, root, files in listing:
        digest.update(f"{name}\t{root}\n".encode())
        for relative in files:
            stat = (root / relative).stat()
            digest.update(f"{relative}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def _fingerprint(files: Sequence[SourceFile]) -> str:
    digest = hashlib.sha256()
    for item in files:
        digest.update(json.dumps([item.source, item.module, item.units], ensure_ascii=True).encode() + b"\n")
    return digest.hexdigest()


def _pool_map(paths: list[str], workers: int) -> list[list[tuple[str, str]]]:
    if workers <= 1 or len(paths) < 2:
        return [_extract_path(path) for path in paths]
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(_extract_path, paths, chunksize=16))


def _assemble(listing: Sequence[tuple[str, Path, list[str]]], extracted: list[list[tuple[str, str]]]) -> TextCorpus:
    """Drop repeated units (licence headers, boilerplate) after their first occurrence; keep order."""
    seen: set[str] = set()
    files: list[SourceFile] = []
    sources: list[dict[str, object]] = []
    position = 0
    for name, root, relatives in listing:
        with_text = 0
        for relative in relatives:
            units = []
            for kind, text in extracted[position]:
                if text not in seen:
                    seen.add(text)
                    units.append((kind, text))
            position += 1
            if units:
                with_text += 1
                files.append(SourceFile(name, module_name(relative), tuple(units)))
        sources.append({"name": name, "root": str(root), "python_files": len(relatives), "files_with_text": with_text})
    return TextCorpus(tuple(files), tuple(sources), _fingerprint(files))


def _read_cache(path: Path) -> TextCorpus | None:
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        files = tuple(
            SourceFile(item["source"], item["module"], tuple((kind, text) for kind, text in item["units"]))
            for item in stored["files"]
        )
        corpus = TextCorpus(files, tuple(stored["sources"]), stored["fingerprint"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return corpus if _fingerprint(files) == corpus.fingerprint else None


def _write_cache(path: Path, corpus: TextCorpus) -> None:
    payload = {
        "fingerprint": corpus.fingerprint,
        "sources": list(corpus.sources),
        "files": [{"source": f.source, "module": f.module, "units": f.units} for f in corpus.files],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_corpus(
    *,
    sources: Sequence[str] = ("stdlib",),
    packages: Iterable[str] | None = None,
    workers: int | None = None,
    cache_dir: Path | None = None,
) -> TextCorpus:
    """The docstrings and comments of ``sources`` (names from SOURCES), extracted or read from the cache.

    The cache (one JSON file per listing under ``cache_dir``) is keyed by every file's path,
    size and mtime, and checked against the stored text fingerprint before it is trusted.
    """
    wanted = None if packages is None else sorted(set(packages))
    listing = []
    for name in sources:
        root = source_root(name)
        listing.append((name, root, python_files(root, packages=wanted) if root.is_dir() else []))
    cache = None if cache_dir is None else cache_dir / f"pytext-{_listing_key(listing)}.json"
    if cache is not None and cache.exists():
        cached = _read_cache(cache)
        if cached is not None:
            return cached
    paths = [str(root / relative) for _, root, relatives in listing for relative in relatives]
    workers = max(1, os.cpu_count() or 1) if workers is None else max(1, workers)
    corpus = _assemble(listing, _pool_map(paths, workers))
    if cache is not None:
        _write_cache(cache, corpus)
    return corpus

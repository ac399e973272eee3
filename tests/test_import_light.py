"""``import memstore`` stays light: the heavy dependencies load only when used."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("sqlalchemy", "alembic", "watchdog", "click", "mcp", "mcp_types", "pydantic", "anyio", "psycopg")

PROBE = """
import json, sys
import memstore
touched = {touch}
for name in touched:
    getattr(memstore, name)
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({heavy!r}))
print(json.dumps(heavy))
"""


def loaded_after(touch: list[str]) -> list[str]:
    code = PROBE.format(touch=touch, heavy=HEAVY)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "touch",
    [
        [],
        ["MemoryCatalog", "MemoryEntry"],
        ["normalize_tags", "memory_matches", "memory_relevance_score", "memory_entry_from_payload"],
        ["MemoryHierarchy", "memory_entries_to_prompt", "MemstoreError"],
    ],
    ids=["import", "catalog", "helpers", "hierarchy"],
)
def test_import_does_not_load_heavy_dependencies(touch: list[str]) -> None:
    assert loaded_after(touch) == []


MODULE_PROBE = """
import json, sys
import {module}
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & {{"mcp", "mcp_types", "pydantic", "anyio"}})))
"""


@pytest.mark.parametrize("module", ["memstore.cli", "memstore.reports", "memstore.workspace", "memstore.mcp_tools"])
def test_only_the_mcp_command_loads_the_sdk(module: str) -> None:
    """Every other command, and the MCP tool table itself, run without the SDK."""
    code = MODULE_PROBE.format(module=module)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_the_mcp_server_module_does_load_the_sdk() -> None:
    """The probe above can fail: the server module itself imports it."""
    code = MODULE_PROBE.format(module="memstore.mcp_server")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert "mcp" in json.loads(result.stdout.strip().splitlines()[-1])


def test_the_probe_detects_a_heavy_import() -> None:
    """The check itself works: importing one of them directly is seen."""
    code = PROBE.format(touch=[], heavy=HEAVY).replace("import memstore\n", "import memstore, click\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == ["click"]


def test_public_names_of_this_layer_exist() -> None:
    import memstore

    for name in ("MemoryCatalog", "MemoryEntry", "MemoryHierarchy", "normalize_tags", "memory_matches"):
        assert name in memstore.__all__
        assert getattr(memstore, name) is not None


def test_every_public_name_is_exported_and_resolves() -> None:
    import memstore

    assert memstore.__all__ == sorted(memstore.__all__)
    assert set(memstore.__all__) == set(memstore._EXPORTS)
    for name in memstore.__all__:
        assert getattr(memstore, name) is not None


TEAM_PROBE = """
import json, sys
import memstore.team_index, memstore.team_report, memstore.source_name
from memstore.team_index import TeamIndex
TeamIndex("postgresql://reader@localhost/memstore")
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"sqlalchemy", "alembic", "psycopg"})))
"""


def test_the_team_index_loads_the_driver_only_when_it_talks_to_the_server() -> None:
    result = subprocess.run([sys.executable, "-c", TEAM_PROBE], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


NOT_ON_THE_READ_PATH = (
    "sqlalchemy",
    "alembic",
    "click",
    "wcwidth",
    "psycopg",
    "secrets",
    "hashlib",  # loads OpenSSL; the trust checks' BLAKE2b comes from _blake2 (memstore.digests)
    "shutil",  # brings bz2 and lzma; only a terminal's width needs it
    "csv",
    "memstore.catalog_rewrite",
    "memstore.rewrite_scan",
    "memstore.index.migrate",
    "memstore.index.trace",
    "memstore.index_url",
    "memstore.reports",
    "memstore.index.report",  # built by a catch-up, refresh or status, never by a current index's read
    "memstore.group_commit",  # made by a catalog's first write
    "memstore.sync_record",
    "logging",  # memstore.logger: imported with the first message, and a current index's search logs none
    "orjson",  # memstore.jsonl: after STDLIB_FIRST_LINES lines; it brings uuid, platform and dataclasses
    "uuid",  # memstore.models: only a write makes a new id
    "platform",  # uuid's
)
"""What a process that only searches a current index never needs: schema tooling, the CLI,
the team driver, and the rewrite, explain and report code."""

SEARCH_PROBE = """
import json, sys
from memstore.catalog import MemoryCatalog
found = MemoryCatalog(sys.argv[1]).search("alpha", limit=5)
print(json.dumps({{"found": len(found), "indexed": "memstore.index.sqlite_search" in sys.modules,
                  "loaded": sorted(name for name in {unwanted!r} if name in sys.modules)}}))
"""

CLI_PROBE = """
import json, sys
from memstore.cli import main
try:
    main(["search", "alpha", "--root", sys.argv[1]])
except SystemExit:
    pass
print(json.dumps(sorted(name for name in {unwanted!r} if name in sys.modules)))
"""


def _store_with_an_index(root: Path) -> None:
    from memstore.catalog import MemoryCatalog

    catalog = MemoryCatalog(root)
    catalog.add("alpha beta", tags=["one"])
    catalog.add("alpha, non-ASCII: é 한국어")
    assert len(catalog.search("alpha")) == 2  # builds the index
    assert (root / ".teaagent" / "index" / "memstore.sqlite3").is_file()


def test_a_search_of_a_current_index_loads_only_the_read_path(tmp_path: Path) -> None:
    """A fresh process searching an index that is already current imports no schema tooling
    (SQLAlchemy, Alembic) and none of the write, explain or report modules."""
    _store_with_an_index(tmp_path)
    code = SEARCH_PROBE.format(unwanted=NOT_ON_THE_READ_PATH)
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"found": 2, "indexed": True, "loaded": []}


def test_the_search_command_loads_only_the_read_path_and_click(tmp_path: Path) -> None:
    """``memstore search`` piped (no terminal width) prints its table without wcwidth, even for
    non-ASCII content in the last column."""
    _store_with_an_index(tmp_path)
    # The command itself needs click, its reports, and the URL parser (for $MEMSTORE_INDEX_URL).
    # click.types imports uuid (and so platform) for its UUID parameter type.
    needed = ("click", "memstore.reports", "memstore.index_url", "uuid", "platform")
    unwanted = tuple(name for name in NOT_ON_THE_READ_PATH if name not in needed)
    code = CLI_PROBE.format(unwanted=unwanted)
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True, timeout=120
    )
    lines = result.stdout.strip().splitlines()
    assert "한국어" in result.stdout and json.loads(lines[-1]) == []


def test_the_read_path_digests_are_hashlibs_own() -> None:
    """memstore.digests avoids importing hashlib, not its results: the same constructors' digests."""
    import hashlib

    from memstore import digests

    data = "memstore \udcff".encode("utf-8", "surrogatepass")
    assert digests.blake2b(data, digest_size=16).digest() == hashlib.blake2b(data, digest_size=16).digest()
    assert digests.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    running = digests.sha256()
    running.update(data)
    assert running.digest() == hashlib.sha256(data).digest()


DATACLASS_RECORDER = """
import dataclasses, json, sys
made = []
process = dataclasses._process_class
def record(cls, *args, **kwargs):
    made.append(f"{cls.__module__}.{cls.__qualname__}")
    return process(cls, *args, **kwargs)
dataclasses._process_class = record
"""
"""Records every dataclass a child process makes; the probes below add what the process does."""

DATACLASS_CLI_PROBE = DATACLASS_RECORDER + """
from memstore.cli import main
try:
    main(["search", "alpha", "--root", sys.argv[1]])
except SystemExit:
    pass
print(json.dumps(sorted(made)))
"""

DATACLASS_PROBE = DATACLASS_RECORDER + """
from memstore.catalog import MemoryCatalog
MemoryCatalog(sys.argv[1]).search("alpha", limit=5)
print(json.dumps(sorted(made)))
"""


REPORTS = ("HealthReport", "MaintenancePreview", "WorkspaceReindex", "WorkspaceStatus")


def test_a_search_makes_only_the_public_dataclasses(tmp_path: Path) -> None:
    """Python 3.11 compiles each dataclass's methods when its module loads (0.3-0.8 ms a class,
    15 ms over the read path before): its records are NamedTuples or plain classes instead."""
    _store_with_an_index(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", DATACLASS_PROBE, str(tmp_path)], capture_output=True, text=True, check=True, timeout=120
    )
    made = json.loads(result.stdout.strip().splitlines()[-1])
    assert made == ["memstore.catalog.QuarantinedEntry", "memstore.models.MemoryEntry"]
    # The search command adds the reports it builds (public report types) and the URL record.
    result = subprocess.run(
        [sys.executable, "-c", DATACLASS_CLI_PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    made = json.loads(result.stdout.strip().splitlines()[-1])
    public = {"memstore.catalog.QuarantinedEntry", "memstore.models.MemoryEntry", "memstore.index_url.IndexUrl"}
    assert set(made) - public == {f"memstore.reports.{name}" for name in REPORTS}


def test_every_command_shares_one_root_path_type() -> None:
    """Each click.Path asks gettext for its name, which stats the locale folders: one shared
    instance instead of one per command (~1.9 ms of every CLI run)."""
    import click

    from memstore.cli import cli

    def commands(group: click.Group) -> list[click.Command]:
        found: list[click.Command] = []
        for command in group.commands.values():
            found.append(command)
            if isinstance(command, click.Group):
                found += commands(command)
        return found

    types = [param.type for command in commands(cli) for param in command.params if param.name == "root"]
    assert len(types) > 20 and len({id(kind) for kind in types}) == 1

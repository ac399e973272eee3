"""``import memstore`` stays light: the heavy dependencies load only when used."""

from __future__ import annotations

import json
import subprocess
import sys

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

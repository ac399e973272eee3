"""``memstore reindex/search --index-url``: the team index from the command line, on a real server.

Every failure is one line on stderr and exit 1, never a traceback: a bad URL, an unknown
source, a reader that tries to write, a server that is down.  A search of this workspace's
own source falls back to its local files with a one-line warning; a team-wide one fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pg_server
import pytest

from memstore.catalog import MemoryCatalog

pytestmark = pytest.mark.pg


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if key != "MEMSTORE_INDEX_URL"}
    environ.update(HOME=str(cwd.parent / "home"), COLUMNS="200", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "memstore", *args], cwd=cwd, env=environ, capture_output=True, text=True,
        errors="backslashreplace", timeout=120, check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def one_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memstore: error: ")
    return lines[0]


def workspace(base: Path, name: str, *contents: str) -> Path:
    root = base / name
    catalog = MemoryCatalog(root)
    for content in contents:
        catalog.add(content, tags=[name])
    return root


@pytest.fixture
def team(tmp_path: Path, pg_database: pg_server.PgUrls) -> dict[str, Any]:
    pay = workspace(tmp_path, "payments", "payment retries back off exponentially", "retries need idempotency keys")
    web = workspace(tmp_path, "web", "the web client retries twice")
    out = ok(run(tmp_path, "reindex", "--index-url", pg_database.writer, "--source", f"pay={pay}",
                 "--source", f"web={web}"))
    assert "schema created" in out and "pay: built, 2 entries" in out and "web: built, 1 entry" in out
    return {"urls": pg_database, "pay": pay, "web": web, "base": tmp_path}


def test_search_labels_hits_with_sources_and_freshness(team: dict[str, Any]) -> None:
    reader = team["urls"].reader
    document = json.loads(ok(run(team["base"], "search", "--index-url", reader, "retries", "--json")))
    assert [(hit["source"], hit["content"]) for hit in document["entries"]] == [
        ("web", "the web client retries twice"),
        ("pay", "retries need idempotency keys"),
        ("pay", "payment retries back off exponentially"),
    ]
    assert document["count"] == 3 and document["fallback"] is None and document["warnings"] == []
    assert [source["name"] for source in document["sources"]] == ["pay", "web"]
    pay_file = team["pay"] / ".teaagent" / "memory.jsonl"
    assert document["sources"][0]["bytes_indexed"] == pay_file.stat().st_size
    assert document["sources"][0]["entries"] == 2 and document["sources"][0]["caught_up_at"].endswith("Z")
    # Chosen sources, the environment variable, the table.
    env = {"MEMSTORE_INDEX_URL": reader}
    document = json.loads(ok(run(team["base"], "search", "--source", "web", "retries", "--json", env=env)))
    assert [hit["source"] for hit in document["entries"]] == ["web"]
    assert [source["name"] for source in document["sources"]] == ["web"]
    text = ok(run(team["base"], "search", "retries", env=env))
    assert "SOURCE" in text and "pay" in text and "sources:" in text and "caught up 20" in text
    lines = ok(run(team["base"], "search", "retries", "--format", "jsonl", env=env)).splitlines()
    assert [json.loads(line)["source"] for line in lines].count("pay") == 2
    # An empty --index-url opts out of the environment's: the local index.
    local = json.loads(ok(run(team["pay"], "search", "--index-url", "", "retries", "--json", env=env)))
    assert local["count"] == 2 and "sources" not in local


def test_catch_up_after_an_append_and_the_default_source_name(team: dict[str, Any]) -> None:
    writer, reader = team["urls"].writer, team["urls"].reader
    MemoryCatalog(team["web"]).add("retries with jitter")
    out = ok(run(team["base"], "reindex", "--index-url", writer, "--source", f"pay={team['pay']}",
                 "--source", f"web={team['web']}", "--json"))
    actions = {source["name"]: source["action"] for source in json.loads(out)["sources"]}
    assert actions == {"pay": "none", "web": "appended"}
    # No --source: this workspace, named after its folder (no git remote).
    report = json.loads(ok(run(team["web"], "reindex", "--index-url", writer, "--json")))
    assert [source["name"] for source in report["sources"]] == ["web/memory.jsonl"]
    document = json.loads(ok(run(team["web"], "search", "--index-url", reader, "--source", ".", "jitter", "--json")))
    assert [hit["source"] for hit in document["entries"]] == ["web/memory.jsonl"]


def test_errors_are_one_line(team: dict[str, Any]) -> None:
    urls, base = team["urls"], team["base"]
    # The reader may search but never write.
    line = one_error(run(base, "reindex", "--index-url", urls.reader, "--source", f"pay={team['pay']}"))
    assert "may only read" in line
    line = one_error(run(base, "search", "--index-url", urls.reader, "--source", "nope", "x"))
    assert "no source named 'nope'" in line
    line = one_error(run(base, "search", "--index-url", "mysql://u@h/db", "x"))
    assert "unsupported scheme" in line
    line = one_error(run(base, "search", "--index-url", "postgresql://u:secret@h:1/db?host=/nonexistent", "x"))
    assert "secret" not in line
    one_error(run(base, "search", "--index-url", urls.reader, "--tag", "x", "x"), 2)
    one_error(run(base, "search", "--source", "pay", "x"), 2)
    one_error(run(base, "reindex", "--index-url", urls.writer, "--source", "pay=/does/not/exist"), 2)
    one_error(run(base, "reindex", "--index-url", urls.writer, "--check"), 2)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_database_unreachable_local_search_falls_back_team_wide_fails(team: dict[str, Any]) -> None:
    base, pay = team["base"], team["pay"]
    dead = f"postgresql://reader@127.0.0.1:{free_port()}/memstore"
    # This workspace's own source: its local files answer, with one warning line.
    result = run(pay, "search", "--index-url", dead, "--source", ".", "retries", "--json")
    document = json.loads(ok(result))
    assert document["fallback"] == "local index" and document["count"] == 2
    assert {hit["source"] for hit in document["entries"]} == {"payments/memory.jsonl"}
    warning = result.stderr.strip().splitlines()
    assert len(warning) == 1 and warning[0].startswith("memstore: warning: team index unavailable")
    # Team-wide: exit 1, one line.
    line = one_error(run(base, "search", "--index-url", dead, "retries"))
    assert "127.0.0.1" in line
    one_error(run(base, "reindex", "--index-url", dead, "--source", f"pay={pay}"))


def test_a_stopped_server(tmp_path: Path) -> None:
    """A real server that was stopped after the index was loaded: the same behaviour."""
    root = workspace(tmp_path, "solo", "the cache is warmed at boot")
    with pg_server.running_cluster() as cluster:
        urls = pg_server.create_database(cluster, "memstore_stopped")
        ok(run(root, "reindex", "--index-url", urls.writer))
        assert json.loads(ok(run(root, "search", "--index-url", urls.reader, "cache", "--json")))["count"] == 1
        cluster.stop()
        result = run(root, "search", "--index-url", urls.reader, "--source", ".", "cache", "--json")
        assert json.loads(ok(result))["fallback"] == "local index"
        assert "team index unavailable" in result.stderr
        one_error(run(root, "search", "--index-url", urls.reader, "cache"))

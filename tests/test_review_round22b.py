"""Adversarial review of binary COPY, the paused collector and per-batch counts (a0e8a17..review4).

Each test pins one defect found; one that is not fixed yet is a strict xfail.
"""

from __future__ import annotations

import random
from pathlib import Path

import psycopg
import pytest
from test_index_differential import write_raw
from test_team_index_differential import Team, entry_line

pytestmark = pytest.mark.pg


def test_a_full_load_sends_long_lines_in_bounded_writes(
    tmp_path: Path, pg_writer_url: str, pg_reader_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full load must not hold a whole batch of rows twice over in memory.

    Cause: ``_load_table`` joined a batch (up to 20,000 rows) into one ``bytes`` before
    writing it, next to the list of its rows: a 45 MB source of 45 KB lines peaked at
    1,292 MB RSS against 982 MB for the text COPY it replaced.  Severity: memory growth.
    """
    from memstore.index.pg import loader

    monkeypatch.setattr(loader, "WRITE_BYTES", 64 * 1024)
    sizes: list[int] = []
    write = psycopg.Copy.write

    def recorded(self: psycopg.Copy, buffer: bytes | str) -> None:
        sizes.append(len(buffer))
        write(self, buffer)

    monkeypatch.setattr(psycopg.Copy, "write", recorded)
    rng = random.Random(5)
    words = [f"w{n}" for n in range(3000)]
    lines = [
        entry_line(" ".join(rng.choice(words) for _ in range(2000)), tags=("long",), memory_id=f"m{n}")
        for n in range(60)
    ]
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    try:
        (catalog,) = team.catalogs.values()
        write_raw(catalog.path, b"\n".join(lines) + b"\n")
        team.catch_up()
        team.check(["w1", "long", "w2999 w3"])
    finally:
        team.close()
    longest_row = 3 * max(map(len, lines))  # raw, c and the terms' ids
    assert len(sizes) > 2
    assert max(sizes) <= 64 * 1024 + longest_row

"""Every team load path sends its rows through one writer, in bounded writes, with its terms counted.

A full load, an append and a small source's in-place rebuild each wrote their binary COPY
rows their own way; only the full load bounded its writes.  They now share
``loader._RowWriter``: these tests force the two other paths and check both the writes'
sizes and the answers (the rows' terms are counted by the same writer, so a miscount
would show in the searches that ``Team.check`` compares with the scan).
"""

from __future__ import annotations

import random
from pathlib import Path

import psycopg
import pytest
from test_index_differential import replace_file, write_raw
from test_team_index_differential import Team, entry_line

pytestmark = pytest.mark.pg

BOUND = 64 * 1024


def recorded_copy_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every ``Copy.write`` from now on, in order (the writes still go through)."""
    sizes: list[int] = []
    write = psycopg.Copy.write

    def recorded(self: psycopg.Copy, buffer: bytes | str) -> None:
        sizes.append(len(buffer))
        write(self, buffer)

    monkeypatch.setattr(psycopg.Copy, "write", recorded)
    return sizes


def long_lines(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    words = [f"w{n}" for n in range(3000)]
    return [
        entry_line(" ".join(rng.choice(words) for _ in range(2000)), tags=("long",), memory_id=f"m{seed}-{n}")
        for n in range(count)
    ]


@pytest.mark.parametrize("path", ["append", "in_place"])
def test_appends_and_small_rebuilds_send_rows_in_bounded_writes(
    tmp_path: Path, pg_writer_url: str, pg_reader_url: str, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    from memstore.index.pg import loader

    monkeypatch.setattr(loader, "WRITE_BYTES", BOUND)
    team = Team(tmp_path, pg_writer_url, pg_reader_url, 1)
    try:
        (catalog,) = team.catalogs.values()
        first = long_lines(1, 3)
        write_raw(catalog.path, b"\n".join(first) + b"\n")
        team.catch_up()
        more = long_lines(2, 60)
        sizes = recorded_copy_writes(monkeypatch)
        in_place: list[int] = []
        rebuild_in_place = loader.SourceLoader._rebuild_in_place

        def spied(self: loader.SourceLoader, *args: object, **kwargs: object) -> int:
            in_place.append(1)
            return rebuild_in_place(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(loader.SourceLoader, "_rebuild_in_place", spied)
        if path == "append":
            with catalog.path.open("ab") as out:
                out.write(b"\n".join(more) + b"\n")
        else:
            replace_file(catalog.path, b"\n".join(first[:1] + more) + b"\n")
        (report,) = team.writer.reindex(team.roots).sources
        team.catch_up()
        team.check(["w1", "long", "w2999 w3", "m2-59", "w17 -w18"])
    finally:
        team.close()
    assert report.action == ("appended" if path == "append" else "rebuilt"), report
    assert len(in_place) == (path == "in_place")
    longest_row = 3 * max(map(len, more))  # raw, c and the terms' ids
    doc_writes = [size for size in sizes if size > 1000]
    assert 2 < len(doc_writes) < len(more)  # bounded, and several rows to a write
    assert max(sizes) <= BOUND + longest_row

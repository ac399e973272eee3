"""TeamIndex with the database down: a local search falls back with a warning, a team-wide one raises."""

from __future__ import annotations

import socket
from pathlib import Path

import pg_server
import pytest

from memstore.catalog import MemoryCatalog
from memstore.errors import IndexServerError, InvalidArgumentError
from memstore.team_index import TeamIndex


def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://reader@127.0.0.1:{port}/memstore"


def test_unreachable_local_fallback_and_team_wide_error(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    MemoryCatalog(one).add("alpha beta", tags=["x"])
    MemoryCatalog(two).add("alpha gamma")
    MemoryCatalog(one).add("alpha")
    with TeamIndex(dead_url()) as team:
        result = team.search("alpha", sources=["one", "two"], local={"one": one, "two": two})
        assert result.fallback == "local index" and len(result.warnings) == 1
        assert "\n" not in result.warnings[0] and "127.0.0.1" in result.warnings[0]
        # The union's ranking: score, newest, then source order.
        assert [(hit.source, hit.entry.content) for hit in result.hits] == [
            ("one", "alpha"), ("two", "alpha gamma"), ("one", "alpha beta")]
        assert [source.name for source in result.sources] == ["one", "two"]
        assert result.sources[0].entries is None and result.sources[0].bytes_indexed > 0
        with pytest.raises(IndexServerError) as info:
            team.search("alpha", local={"one": one})  # every source: team-wide
        assert "\n" not in str(info.value)
        with pytest.raises(IndexServerError):
            team.search("alpha", sources=["one", "three"], local={"one": one})
        with pytest.raises(IndexServerError):
            team.reindex({"one": one})
        with pytest.raises(IndexServerError):
            team.find_matching(["a.py"], "fix the thing")


@pytest.mark.pg
def test_stopped_server_and_unknown_source(tmp_path: Path) -> None:
    root = tmp_path / "solo"
    MemoryCatalog(root).add("warm the cache")
    with pg_server.running_cluster() as cluster:
        urls = pg_server.create_database(cluster, "memstore_down")
        with TeamIndex(urls.writer) as writer:
            writer.reindex({"solo": root})
        reader = TeamIndex(urls.reader)
        assert [hit.source for hit in reader.search("cache").hits] == ["solo"]
        with pytest.raises(InvalidArgumentError):
            reader.search("cache", sources=["other"], local={"other": root})  # not a database failure
        cluster.stop()
        # A pooled connection to a stopped server fails too, as a typed error or a fallback.
        result = reader.search("cache", sources=["solo"], local={"solo": root})
        assert result.fallback == "local index" and [hit.entry.content for hit in result.hits] == ["warm the cache"]
        with pytest.raises(IndexServerError):
            reader.search("cache")
        reader.close()


def test_a_file_changing_under_the_catch_up_is_retried_never_saved_unproven(
    tmp_path: Path, pg_writer_url: str, pg_reader_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstore.errors import StorageError
    from memstore.index import source

    root = tmp_path / "moving"
    MemoryCatalog(root).add("first line")
    name = f"moving-{tmp_path.name}"
    real = source.SourceState.of_file
    failures = iter([True])

    def flaky(*args: object, **kwargs: object) -> object:
        return None if next(failures, False) else real(*args, **kwargs)  # type: ignore[arg-type]

    with TeamIndex(pg_writer_url) as writer, TeamIndex(pg_reader_url) as reader:
        monkeypatch.setattr(source.SourceState, "of_file", staticmethod(flaky))
        assert writer.reindex({name: root}).sources[0].action == "built"
        assert [hit.entry.content for hit in reader.search("first", sources=[name]).hits] == ["first line"]
        MemoryCatalog(root).add("second line")
        monkeypatch.setattr(source.SourceState, "of_file", staticmethod(lambda *a, **k: None))
        with pytest.raises(StorageError) as info:
            writer.reindex({name: root})
        assert "kept changing" in str(info.value) and "\n" not in str(info.value)
        # Nothing of the failed catch-up is visible.
        assert [hit.entry.content for hit in reader.search("line", sources=[name]).hits] == ["first line"]
        monkeypatch.setattr(source.SourceState, "of_file", real)
        assert writer.reindex({name: root}).sources[0].action == "appended"
        assert len(reader.search("line", sources=[name]).hits) == 2

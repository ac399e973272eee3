"""The reads of stores opened with ``index_url=`` (a catalog on its own team-index source), A/B.

``benchmarks.team`` measures the union search of :class:`~memstore.team_index.TeamIndex`;
this measures what one store's reads cost through the shared index: search over the
benchmark mix, ``list`` (plain and tag-filtered) and ``show`` (a hit and a miss).  The
catalog of ``--size`` lines is cut into ``--sources`` workspaces, loaded once into a
throwaway cluster; then each of ``--trees`` (source trees of memstore, e.g. a
``git archive`` of another commit) measures in its own process, the trees taking turns
``--rounds`` times, so a before/after pair shares the same minutes and the same load.

    python -m benchmarks.store_url --size 100k --sources 10 --trees /tmp/base .
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.generate import dataset, parse_size
from benchmarks.measure import percentile
from benchmarks.queries import SEARCH_MIX
from benchmarks.team import DURABLE, TESTS, split

LIMIT = 10
WALK_SQL = (
    "SELECT count(*) FROM (SELECT off, lag(off + len + 1) OVER (ORDER BY id) AS prev FROM team_doc"
    " WHERE part = %s) w WHERE off <> coalesce(prev, 0)"
)
"""What proving every row of a source in file order would cost per read (the gaps it returns aside)."""
COUNT_SQL = "SELECT count(*) FROM team_doc WHERE part = %s"


def measure(url: str, roots: dict[str, str], repeats: int, skip: Sequence[str] = ()) -> dict[str, Any]:
    """p50 in ms of each read over every store (runs in the tree under measurement)."""
    import memstore
    from memstore.catalog import MemoryCatalog

    stores = [MemoryCatalog(Path(root), readonly=True, index_url=url, source_name=name) for name, root in roots.items()]
    ids = []
    for store in stores:
        newest = store.list(limit=1)
        ids.append(newest[0].memory_id if newest else "none")
    tag = "python"
    sys.path.insert(0, str(TESTS))
    import pg_server

    conn = pg_server.connect(url)
    part_sql = "SELECT part FROM team_source WHERE name = %s"
    part_of = {store: conn.execute(part_sql, (name,)).fetchone()[0] for store, name in zip(stores, roots, strict=True)}
    ops: dict[str, Any] = {
        **{f"search {q.text}": (lambda text: lambda s, i: s.search(text, limit=LIMIT))(q.text) for q in SEARCH_MIX},
        "list": lambda s, i: s.list(limit=LIMIT),
        "list_tag": lambda s, i: s.list(limit=LIMIT, tags=[tag]),
        "show": lambda s, i: s.show(i),
        "show_miss": lambda s, i: _missing(s),
        "sql_walk_all_rows": lambda s, i: conn.execute(WALK_SQL, (part_of[s],)).fetchone(),
        "sql_count_rows": lambda s, i: conn.execute(COUNT_SQL, (part_of[s],)).fetchone(),
    }
    ops = {op: run for op, run in ops.items() if op not in skip}
    timings: dict[str, list[float]] = {op: [] for op in ops}
    for number in range(repeats + 1):  # the first pass warms the caches, untimed
        for store, memory_id in zip(stores, ids, strict=True):
            for op, run in ops.items():
                started = time.perf_counter()
                run(store, memory_id)
                elapsed = time.perf_counter() - started
                if number:
                    timings[op].append(elapsed)
    searches = [value for op, values in timings.items() if op.startswith("search ") for value in values]
    result: dict[str, Any] = {op: round(percentile(values, 0.5) * 1000, 3) for op, values in timings.items()
              if not op.startswith("search ")}
    result["search"] = round(percentile(searches, 0.5) * 1000, 3)
    result["tree"] = str(Path(memstore.__file__).parent.parent)
    return result


def _missing(store: Any) -> None:
    from memstore.errors import EntryNotFoundError

    with contextlib.suppress(EntryNotFoundError):
        store.show("no-such-memory-id")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100k")
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trees", nargs="+", default=["."])
    parser.add_argument("--skip", nargs="*", default=[], help="reads not to time (show, ...)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        spec = json.loads(args.measure)
        print(json.dumps(measure(spec["url"], spec["roots"], spec["repeats"], spec["skip"])))
        return 0
    sys.path.insert(0, str(TESTS))
    import pg_server

    from memstore.catalog import MemoryCatalog

    catalog = dataset("catalog", parse_size(args.size)).file
    with tempfile.TemporaryDirectory() as work, pg_server.running_cluster(settings=DURABLE) as cluster:
        roots = split(catalog, Path(work), args.sources)
        urls = pg_server.create_database(cluster, "memstore_store_url")
        for name, root in roots.items():
            MemoryCatalog(root, index_url=urls.writer, source_name=name).list(limit=1)  # loads the source
        with pg_server.connect(urls.admin) as conn:
            conn.execute("VACUUM ANALYZE")
        spec = json.dumps({"url": urls.reader, "roots": {n: str(r) for n, r in roots.items()}, "repeats": args.repeats,
                           "skip": args.skip})
        for number in range(args.rounds):
            for tree in args.trees[:: 1 if number % 2 == 0 else -1]:  # turns alternate: no tree always first
                # From the tree's directory: the tree's memstore comes first on the path, benchmarks from here.
                tree_dir = str(Path(tree).resolve())
                env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree_dir, str(Path.cwd())]))
                out = subprocess.run([sys.executable, "-m", "benchmarks.store_url", "--measure", spec], env=env,
                                     cwd=tree_dir, check=True, capture_output=True, text=True).stdout
                load = os.getloadavg()[0]
                print(json.dumps({"round": number, "load1": round(load, 2), **json.loads(out)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Measurements behind docs/postgres-notes.md: COPY, GIN on text[] vs pg_trgm, locks, snapshots.

    python -m benchmarks.pg_probe --size 1m                    # starts a throwaway server
    python -m benchmarks.pg_probe --size 100k --url postgresql://postgres@/postgres?host=/tmp/...

Rows are the shape a PostgreSQL index would hold: (id bigint, src int, c text, t text,
created_at text, bonus int, terms text[]), from the benchmark catalog.  The server
started here runs with durability on (fsync, synchronous_commit, full page writes), so
the figures are what a real server pays.  Results go to stdout and, with --json, a file.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.generate import dataset, parse_size
from benchmarks.pg_probe_locks import probe_locks

TESTS = Path(__file__).resolve().parent.parent / "tests"
TERM = re.compile(r"[0-9A-Za-z\u0080-\U0010ffff]+")
SEPARATORS = r"[\x01-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]+"
"""Every ASCII character but letters and digits (text holds no NUL in PostgreSQL)."""
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "shared_buffers": "256MB",
           "maintenance_work_mem": "256MB", "max_wal_size": "4GB", "checkpoint_timeout": "15min"}  # fmt: skip
COLUMNS = (
    "id bigint PRIMARY KEY, src int NOT NULL, c text NOT NULL, t text NOT NULL, created_at text, bonus int NOT NULL"
)
Row = tuple[int, int, str, str, str, int, list[str]]

results: dict[str, Any] = {}


def note(key: str, value: Any, text: str) -> None:
    results[key] = value
    print(f"{key:<42} {text}", flush=True)


def load_rows(size: int, path: Path) -> list[Row]:
    """The catalog's first ``size`` lines as rows; 10 sources, round robin by line."""
    rows: list[Row] = []
    started = time.perf_counter()
    with path.open("rb") as handle:
        for number, line in enumerate(handle):
            if number >= size:
                break
            entry = json.loads(line)
            c = entry["content"].lower()
            if "\x00" in c:
                continue
            tags = [str(t).strip().lower() for t in entry.get("tags") or []]
            bonus = (4 if "auto-curated" in tags else 0) + (2 if "run-summary" in tags else 0)
            rows.append((number + 1, number % 10, c, "\n".join(tags), entry["created_at"], bonus, TERM.findall(c)))
    seconds = round(time.perf_counter() - started, 1)
    note("parse_s", seconds, f"{len(rows):,} rows parsed in Python in {seconds} s")
    chars = round(statistics.fmean(len(r[2]) for r in rows))
    note("avg_c_chars", chars, f"{chars} characters of content on average")
    terms = round(statistics.fmean(len(r[6]) for r in rows), 1)
    unique = round(statistics.fmean(len(set(r[6])) for r in rows), 1)
    note("avg_terms", {"all": terms, "distinct": unique}, f"{terms} terms per row ({unique} distinct)")
    return rows


def timed(func: Callable[[], Any], repeat: int = 15, budget_s: float = 8.0) -> tuple[float, float, Any]:
    """(p50 ms, p95 ms, last value) over up to ``repeat`` warm runs after one warm-up.

    Slow queries stop after ``budget_s`` (at least 3 runs), and one whose first run takes a
    quarter of the budget is run once, so a seq scan does not eat a shared machine.
    """
    started = time.perf_counter()
    value = func()
    first = (time.perf_counter() - started) * 1000
    if first > budget_s * 250:
        return round(first, 2), round(first, 2), value  # one cold run of a query this slow says enough
    times: list[float] = []
    spent = 0.0
    while len(times) < repeat and (len(times) < 3 or spent < budget_s):
        started = time.perf_counter()
        value = func()
        times.append((time.perf_counter() - started) * 1000)
        spent += times[-1] / 1000
    times.sort()
    return round(statistics.median(times), 2), round(times[max(0, round(len(times) * 0.95) - 1)], 2), value


def array_literal(terms: Sequence[str]) -> str:
    """A text[] in COPY's text form; psycopg's own list dumper is the slow part of a COPY."""
    return "{" + ",".join('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in terms) + "}"


def copy_rows(conn: Any, table: str, rows: Sequence[Row], *, terms: str = "none") -> float:
    """COPY ``rows`` into ``table``; rows per second.

    ``terms``: "none" (not sent), "list" (a Python list, psycopg adapts it), "literal" (an
    array literal built here, deduplicated), "joined" (one space-separated text).
    """
    columns = "id, src, c, t, created_at, bonus" + ("" if terms == "none" else ", terms")
    started = time.perf_counter()
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            if terms == "none":
                copy.write_row(row[:6])
            elif terms == "list":
                copy.write_row((*row[:6], list(dict.fromkeys(row[6]))))
            elif terms == "literal":
                copy.write_row((*row[:6], array_literal(list(dict.fromkeys(row[6])))))
            else:
                copy.write_row((*row[:6], " ".join(dict.fromkeys(row[6]))))
    conn.commit()
    return len(rows) / (time.perf_counter() - started)


def size_mb(conn: Any, relation: str) -> float:
    return round(conn.execute("SELECT pg_total_relation_size(%s::regclass)", [relation]).fetchone()[0] / 2**20, 1)


SPLIT = f"array_remove(regexp_split_to_array(c, '{SEPARATORS}'), '')"


def probe_copy(conn: Any, rows: list[Row]) -> None:
    conn.execute(f"CREATE TABLE doc_plain ({COLUMNS})")
    conn.execute(f"CREATE TABLE doc ({COLUMNS}, terms text[] NOT NULL)")
    conn.execute(f"CREATE TABLE doc_list ({COLUMNS}, terms text[] NOT NULL)")
    conn.execute(f"CREATE UNLOGGED TABLE doc_unlogged ({COLUMNS}, terms text[] NOT NULL)")
    conn.execute(f"CREATE TABLE doc_joined ({COLUMNS}, terms text NOT NULL)")
    conn.execute(f"CREATE TABLE doc_gen ({COLUMNS}, terms text[] GENERATED ALWAYS AS ({SPLIT}) STORED)")
    conn.commit()
    for table, terms, text in (
        ("doc_plain", "none", "COPY without terms"),
        ("doc", "literal", "COPY, terms text[] as literals built in Python"),
        ("doc_joined", "joined", "COPY, terms as one space-joined text"),
        ("doc_gen", "none", "COPY, terms a generated column (regexp split)"),
        ("doc_list", "list", "COPY, terms text[] from Python lists (psycopg adapts)"),
        ("doc_unlogged", "literal", "COPY, terms as literals, into an UNLOGGED table"),
    ):
        part = rows if table != "doc_list" else rows[: min(len(rows), 100_000)]
        rate = copy_rows(conn, table, part, terms=terms)
        note(f"copy_{table}_rows_s", round(rate), f"{rate:,.0f} rows/s {text} ({len(part):,} rows)")
        note(f"size_{table}_mb", size_mb(conn, table), f"{size_mb(conn, table)} MB table ({table})")
    differ = conn.execute(
        "SELECT count(*) FROM doc d JOIN doc_gen g USING (id) WHERE NOT (d.terms @> g.terms AND g.terms @> d.terms)"
    ).fetchone()[0]
    note("generated_terms_differ", differ, f"rows whose generated terms differ (as sets) from Python's: {differ}")
    conn.execute("DROP TABLE doc_gen")
    conn.execute("DROP TABLE doc_list")
    conn.execute("DROP TABLE doc_unlogged")
    conn.commit()


def vacuum(conn: Any, table: str) -> None:
    conn.commit()
    conn.autocommit = True
    conn.execute(f"VACUUM ANALYZE {table}")
    conn.autocommit = False


def build(conn: Any, key: str, ddl: str) -> None:
    started = time.perf_counter()
    conn.execute(ddl)
    conn.commit()
    seconds = round(time.perf_counter() - started, 1)
    index = ddl.split()[2]
    note(f"build_{key}_s", seconds, f"{seconds} s to build {index}, {size_mb(conn, index)} MB")
    results[f"size_{key}_mb"] = size_mb(conn, index)


def probe_indexes(conn: Any, rows: list[Row]) -> None:
    conn.execute("SET maintenance_work_mem = '256MB'")
    build(conn, "gin_terms", "CREATE INDEX doc_terms ON doc USING gin (terms)")
    build(conn, "gin_trgm", "CREATE INDEX doc_trgm ON doc USING gin (c gin_trgm_ops)")
    build(conn, "gin_expr_split", f"CREATE INDEX doc_plain_split ON doc_plain USING gin (({SPLIT}))")
    joined = "CREATE INDEX doc_joined_split ON doc_joined USING gin ((string_to_array(terms, ' ')))"
    build(conn, "gin_expr_joined", joined)
    for table in ("doc", "doc_plain", "doc_joined"):
        vacuum(conn, table)
    # The catch-up shape: more rows into the indexed table (GIN fastupdate on, the default).
    extra = [(r[0] + 10_000_000, *r[1:]) for r in rows[: min(len(rows), 100_000)]]
    rate = copy_rows(conn, "doc", extra, terms="literal")
    note("copy_into_indexed_rows_s", round(rate), f"{rate:,.0f} rows/s COPY of {len(extra):,} rows into both GINs")
    conn.execute("DELETE FROM doc WHERE id >= 10000000")
    conn.commit()
    vacuum(conn, "doc")
    # The same without GIN's pending list: every row goes straight into both indexes.
    conn.execute("ALTER INDEX doc_terms SET (fastupdate = off)")
    conn.execute("ALTER INDEX doc_trgm SET (fastupdate = off)")
    conn.commit()
    rate = copy_rows(conn, "doc", extra[:5_000], terms="literal")
    note("copy_into_indexed_nofastupdate_rows_s", round(rate), f"{rate:,.0f} rows/s the same, fastupdate off (5k rows)")
    conn.execute("DELETE FROM doc WHERE id >= 10000000")
    conn.execute("ALTER INDEX doc_terms RESET (fastupdate)")
    conn.execute("ALTER INDEX doc_trgm RESET (fastupdate)")
    conn.commit()
    vacuum(conn, "doc")


def like_pattern(token: str) -> str:
    escaped = token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def pick_terms(rows: list[Row]) -> dict[str, Any]:
    """Terms by document frequency: a common, a mid and a rare one, and sets of mid/rare ones for ORs."""
    df: Counter[str] = Counter()
    for row in rows:
        df.update(set(row[6]))
    n = len(rows)

    def nearest(target: float, count: int, min_len: int) -> list[str]:
        """The ``count`` words (of ``min_len``+ characters) whose frequency is nearest ``target`` rows."""
        fits = [w for w in df if len(w) >= min_len]
        fits.sort(key=lambda w: (abs(math.log(df[w] / target)), w))
        return fits[:count]

    common = max((w for w in df if len(w) >= 3), key=lambda w: (df[w], w))
    mid_band = nearest(n * 0.01, 400, 4)
    rare_band = nearest(10, 400, 5)
    rnd = random.Random(15)
    picked = {
        "common": common,
        "mid": mid_band[0],
        "rare": rare_band[0],
        "or_rare": rnd.sample(rare_band, len(rare_band)),
        "or_mid": rnd.sample(mid_band, len(mid_band)),
        "df": {},
        "vocabulary": len(df),
    }
    for key in ("common", "mid", "rare"):
        picked["df"][key] = df[picked[key]]
    note("vocabulary", len(df), f"{len(df):,} distinct terms")
    for band in ("or_rare", "or_mid"):
        freqs = sorted(df[w] for w in picked[band])
        note(f"{band}_df", [freqs[0], freqs[-1]], f"{band}: {len(freqs)} words, {freqs[0]:,}..{freqs[-1]:,} rows each")
    for key in ("common", "mid", "rare"):
        word = picked[key]
        print(f"  {key}: {word!r} in {df[word]:,} rows")
    return picked


def probe_queries(conn: Any, picked: dict[str, Any]) -> None:
    def run(sql: str, params: Sequence[Any]) -> Callable[[], Any]:
        return lambda: conn.execute(sql, params).fetchall()

    def plan(sql: str, params: Sequence[Any]) -> str:
        lines = [r[0] for r in conn.execute("EXPLAIN " + sql, params).fetchall()]
        nodes = [ln.strip().lstrip("-> ").split("  ")[0] for ln in lines if "Scan" in ln or "BitmapOr" in ln]
        return "; ".join(nodes[:3])

    shapes = {
        "terms_overlap": ("SELECT count(*) FROM doc WHERE terms && %s::text[]", lambda ws: [ws]),
        "terms_contains": ("SELECT count(*) FROM doc WHERE terms @> %s::text[]", lambda ws: [ws]),
        "trgm_like": (
            "SELECT count(*) FROM doc WHERE c LIKE ANY (%s::text[])",
            lambda ws: [[like_pattern(w) for w in ws]],
        ),
        "trgm_like_strpos": (
            "SELECT count(*) FROM doc WHERE c LIKE %s AND strpos(c, %s) > 0",
            lambda ws: [like_pattern(ws[0]), ws[0]],
        ),
        "expr_split_overlap": (f"SELECT count(*) FROM doc_plain WHERE {SPLIT} && %s::text[]", lambda ws: [ws]),
        "expr_joined_overlap": (
            "SELECT count(*) FROM doc_joined WHERE string_to_array(terms, ' ') && %s::text[]",
            lambda ws: [ws],
        ),
        "terms_top10": ("SELECT id FROM doc WHERE terms && %s::text[] ORDER BY id DESC LIMIT 10", lambda ws: [ws]),
        "terms_top10_fenced": (
            "SELECT id FROM (SELECT id FROM doc WHERE terms && %s::text[] OFFSET 0) s ORDER BY id DESC LIMIT 10",
            lambda ws: [ws],
        ),
        "terms_overlap_forced": ("SELECT count(*) FROM doc WHERE terms && %s::text[]", lambda ws: [ws]),
        "terms_top10_fenced_forced": (
            "SELECT id FROM (SELECT id FROM doc WHERE terms && %s::text[] OFFSET 0) s ORDER BY id DESC LIMIT 10",
            lambda ws: [ws],
        ),
        "trgm_like_forced": (
            "SELECT count(*) FROM doc WHERE c LIKE ANY (%s::text[])",
            lambda ws: [[like_pattern(w) for w in ws]],
        ),
        "trgm_top10": (
            "SELECT id FROM doc WHERE c LIKE ANY (%s::text[]) ORDER BY id DESC LIMIT 10",
            lambda ws: [[like_pattern(w) for w in ws]],
        ),
    }
    expr_tables = conn.execute("SELECT to_regclass('doc_plain') IS NOT NULL").fetchone()[0]
    for which in ("common", "mid", "rare"):
        word = picked[which]
        for shape, (sql, params) in shapes.items():
            if shape.endswith("_forced") or (shape.startswith("expr_") and (which == "common" or not expr_tables)):
                continue  # forced plans are for the ORs; a split on every row takes tens of seconds at 1M
            p50, p95, value = timed(run(sql, params([word])))
            count = value[0][0] if "top10" not in shape else len(value)
            key = f"q_{which}_{shape}"
            note(key, {"p50_ms": p50, "p95_ms": p95, "rows": count, "plan": plan(sql, params([word]))},
                 f"p50 {p50:8.2f} ms  p95 {p95:8.2f} ms  rows {count:>8,}  {plan(sql, params([word]))}")
    # psycopg prepares a statement after 5 runs; a generic plan cannot see which term it got.
    sql, params = shapes["terms_top10"]
    conn.execute("SET plan_cache_mode = force_generic_plan")
    p50, p95, _ = timed(lambda: conn.execute(sql, params([picked["rare"]]), prepare=True).fetchall(), repeat=7)
    conn.execute("RESET plan_cache_mode")
    note("q_rare_terms_top10_generic_plan", {"p50_ms": p50, "p95_ms": p95},
         f"p50 {p50:8.2f} ms  p95 {p95:8.2f} ms  the rare top-10 on a generic (prepared) plan")
    for band in ("or_rare", "or_mid"):
        for n in (20, 100, 400):
            words = picked[band][:n]
            if len(words) < n:
                continue
            for shape in ("terms_overlap", "terms_overlap_forced", "terms_top10", "terms_top10_fenced_forced",
                          "trgm_like", "trgm_like_forced", "trgm_top10"):  # fmt: skip
                sql, params = shapes[shape]
                forced = shape.endswith("_forced")
                if forced:
                    conn.execute("SET enable_seqscan = off")
                p50, p95, value = timed(run(sql, params(words)), repeat=7)
                shown = plan(sql, params(words))
                if forced:
                    conn.execute("RESET enable_seqscan")
                count = value[0][0] if "top10" not in shape else len(value)
                key = f"q_{band}{n}_{shape}"
                note(key, {"p50_ms": p50, "p95_ms": p95, "rows": count, "plan": shown},
                     f"p50 {p50:8.2f} ms  p95 {p95:8.2f} ms  rows {count:>8,}  {shown}")


def probe_generated_cost(conn: Any, rows: list[Row]) -> None:
    """The generated column's own cost, apart from COPY: the split over the whole table, and a dedup variant."""
    started = time.perf_counter()
    conn.execute(f"SELECT sum(cardinality({SPLIT})) FROM doc")
    seconds = time.perf_counter() - started
    rate = len(rows) / seconds
    note("split_in_sql_rows_s", round(rate), f"{rate:,.0f} rows/s: the split alone in SQL")
    started = time.perf_counter()
    count = sum(len(TERM.findall(r[2])) for r in rows)
    seconds = time.perf_counter() - started
    rate = len(rows) / seconds
    note("split_in_python_rows_s", round(rate), f"{rate:,.0f} rows/s: the split in Python ({count:,} terms)")


def probe_unicode_split(conn: Any) -> None:
    """Edge cases of the generated split against Python's definition."""
    samples = ["café_au-lait", "日本語テキスト", "a.b/c\\d%e_f", "x\u00a0y", "ǅemal ﬁle"]
    samples += ["𝔘nicode", "tab\there", " lead", "é1é"]
    differ = []
    for text in samples:
        c = text.lower()
        got = conn.execute(f"SELECT array_remove(regexp_split_to_array(%s, '{SEPARATORS}'), '')", [c]).fetchone()[0]
        if got != TERM.findall(c):
            differ.append((text, got, TERM.findall(c)))
    note("split_edge_cases_differ", len(differ), f"{len(differ)} of {len(samples)} edge cases differ {differ or ''}")


def probe_or_plans(conn: Any, picked: dict[str, Any]) -> None:
    """ORs of many terms: what the planner picks, and what a forced bitmap or better statistics change."""

    def estimate(sql: str, params: Sequence[Any]) -> tuple[int, str]:
        top = conn.execute("EXPLAIN " + sql, params).fetchall()
        lines = [r[0] for r in top]
        scan = next((ln for ln in lines if "Scan" in ln), "")
        rows = int(re.search(r"rows=(\d+)", scan).group(1)) if "rows=" in scan else -1
        return rows, scan.strip().lstrip("-> ").split("  ")[0]

    overlap = "SELECT count(*) FROM doc WHERE terms && %s::text[]"
    ored = "SELECT count(*) FROM doc WHERE {}"
    top10 = "SELECT id FROM (SELECT id FROM doc WHERE terms && %s::text[] OFFSET 0) s ORDER BY id DESC LIMIT 10"
    for stats in ("default", "10000"):
        if stats != "default":
            conn.execute(f"ALTER TABLE doc ALTER COLUMN terms SET STATISTICS {stats}")
            started = time.perf_counter()
            conn.execute("ANALYZE doc")
            seconds = round(time.perf_counter() - started, 1)
            note(f"analyze_stats_{stats}_s", seconds, f"{seconds} s: ANALYZE doc with statistics target {stats}")
        conn.commit()
        for n in (20, 100, 400):
            words = picked["or_rare"][:n]
            rows, scan = estimate(overlap, [words])
            key = f"or_rare{n}_stats_{stats}"
            conn.execute("SET enable_seqscan = off")
            actual = conn.execute(overlap, [words]).fetchone()[0]
            conn.execute("RESET enable_seqscan")
            p50 = None  # a planned seq scan was timed by probe_queries; here the estimate is the point
            if "Seq Scan" not in scan:
                p50 = timed(lambda words=words: conn.execute(overlap, [words]).fetchall(), repeat=5, budget_s=4)[0]
            note(f"{key}_planner", {"estimate": rows, "actual": actual, "plan": scan, "p50_ms": p50},
                 f"estimate {rows:,} rows for {actual:,}: {scan}, p50 {p50} ms")
            conn.execute("SET enable_seqscan = off")
            p50, _, _ = timed(lambda words=words: conn.execute(overlap, [words]).fetchall(), repeat=7)
            t50, _, _ = timed(lambda words=words: conn.execute(top10, [words]).fetchall(), repeat=7)
            conn.execute("RESET enable_seqscan")
            note(f"{key}_forced_bitmap", {"count_p50_ms": p50, "top10_p50_ms": t50},
                 f"enable_seqscan off: count p50 {p50:.2f} ms, fenced top-10 p50 {t50:.2f} ms")
            if stats == "default" and n <= 100:
                clause = " OR ".join(["terms @> %s::text[]"] * n)
                params = [[w] for w in words]
                sql = ored.format(clause)
                p50, _, _ = timed(lambda sql=sql, params=params: conn.execute(sql, params).fetchall(), repeat=7)
                plan = estimate(sql, params)[1]
                text = f"OR of {n} single-term @>: p50 {p50:.2f} ms ({plan})"
                note(f"or_rare{n}_bitmapor", {"p50_ms": p50, "plan": plan}, text)
        conn.commit()
    conn.execute("ALTER TABLE doc ALTER COLUMN terms SET STATISTICS -1")
    conn.execute("ANALYZE doc")
    conn.commit()


def probe_vocab(conn: Any) -> None:
    """A substring token becomes the vocabulary words that contain it, then one ``&&`` over those."""
    started = time.perf_counter()
    conn.execute("CREATE TABLE vocab (word text PRIMARY KEY, df int NOT NULL)")
    conn.execute("INSERT INTO vocab SELECT w, count(*) FROM doc, unnest(terms) AS w GROUP BY w")
    conn.execute("CREATE INDEX vocab_trgm ON vocab USING gin (word gin_trgm_ops)")
    conn.commit()
    vacuum(conn, "vocab")
    words = conn.execute("SELECT count(*) FROM vocab").fetchone()[0]
    seconds = round(time.perf_counter() - started, 1)
    index_mb = size_mb(conn, "vocab_trgm")
    note("vocab_build_s", seconds, f"{seconds} s: vocabulary of {words:,} words with df, trgm index {index_mb} MB")
    sample = [r[0] for r in conn.execute("SELECT word FROM vocab WHERE length(word) >= 6 ORDER BY md5(word) LIMIT 200")]
    conn.commit()
    expand = "SELECT word FROM vocab WHERE word LIKE %s"
    both = "SELECT count(*) FROM doc WHERE terms && ARRAY(SELECT word FROM vocab WHERE word LIKE %s)"
    for length in (3, 4, 5):
        subs = [w[1 : 1 + length] for w in sample[:40]]
        lat, counts = [], []
        for sub in subs:
            p50, _, found = timed(lambda sub=sub: conn.execute(expand, [like_pattern(sub)]).fetchall(), repeat=3)
            lat.append(p50)
            counts.append(len(found))
        lat.sort()
        counts.sort()
        mid, top, words_mid, words_top = lat[len(lat) // 2], lat[-1], counts[len(counts) // 2], counts[-1]
        note(f"vocab_expand_{length}ch", {"p50_ms": mid, "max_ms": top, "words_p50": words_mid, "words_max": words_top},
             f"{length}-char substring -> words: p50 {mid:.2f} ms (max {top:.1f}), words {words_mid} (max {words_top})")
        lat = sorted(
            timed(lambda sub=sub: conn.execute(both, [like_pattern(sub)]).fetchall(), repeat=3)[0] for sub in subs[:15]
        )
        note(f"vocab_then_terms_{length}ch", {"p50_ms": lat[len(lat) // 2], "max_ms": lat[-1]},
             f"{length}-char substring -> words -> rows: p50 {lat[len(lat) // 2]:.2f} ms, max {lat[-1]:.1f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1m", help="catalog size (10k, 100k, 1m)")
    parser.add_argument("--url", help="superuser URL of an existing server (default: start a throwaway one)")
    parser.add_argument("--catalog", type=Path, help="read the first --size lines of this memory.jsonl instead")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parts = ["all", "queries", "or-plans"]
    parser.add_argument("--part", choices=parts, default="all", help="load doc only, then measure that part")
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    rows = load_rows(size, args.catalog or dataset("catalog", size).file)
    run = {"all": run_all, "queries": run_queries, "or-plans": run_or_plans}[args.part]
    if args.url:
        run(args.url, rows)
    else:
        sys.path.insert(0, str(TESTS))
        import pg_server

        with pg_server.running_cluster(settings=DURABLE) as cluster:
            print(f"server: {cluster.socket_dir} (durability on)", flush=True)
            run(cluster.urls().admin, rows)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


def run_all(url: str, rows: list[Row]) -> None:
    import psycopg

    with psycopg.connect(url, prepare_threshold=None) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        conn.commit()
        version = conn.execute("SHOW server_version").fetchone()[0]
        note("server", version, f"PostgreSQL {version}")
        probe_unicode_split(conn)
        probe_copy(conn, rows)
        section(conn, lambda: probe_generated_cost(conn, rows))
        probe_indexes(conn, rows)
        picked = pick_terms(rows)
        results["terms"] = {k: v for k, v in picked.items() if not k.startswith("or_")}
        section(conn, lambda: probe_queries(conn, picked))
        section(conn, lambda: probe_or_plans(conn, picked))
        section(conn, lambda: probe_vocab(conn))
    section(None, lambda: probe_locks(url, note))


def load_doc(conn: Any, rows: list[Row], *, trgm: bool) -> None:
    """Only the ``doc`` table (terms from Python) and its GIN indexes, for the parts after the load."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    conn.execute(f"CREATE TABLE doc ({COLUMNS}, terms text[] NOT NULL)")
    conn.commit()
    copy_rows(conn, "doc", rows, terms="literal")
    conn.execute("SET maintenance_work_mem = '256MB'")
    build(conn, "gin_terms", "CREATE INDEX doc_terms ON doc USING gin (terms)")
    if trgm:
        build(conn, "gin_trgm", "CREATE INDEX doc_trgm ON doc USING gin (c gin_trgm_ops)")
    vacuum(conn, "doc")


def run_queries(url: str, rows: list[Row]) -> None:
    import psycopg

    with psycopg.connect(url, prepare_threshold=None) as conn:
        load_doc(conn, rows, trgm=True)
        picked = pick_terms(rows)
        section(conn, lambda: probe_queries(conn, picked))
        section(conn, lambda: probe_or_plans(conn, picked))
        section(conn, lambda: probe_vocab(conn))
    section(None, lambda: probe_locks(url, note))


def run_or_plans(url: str, rows: list[Row]) -> None:
    import psycopg

    with psycopg.connect(url, prepare_threshold=None) as conn:
        load_doc(conn, rows, trgm=False)
        probe_or_plans(conn, pick_terms(rows))


def section(conn: Any, func: Callable[[], None]) -> None:
    """Run one part; a failure is reported and the next part still runs on the loaded tables."""
    try:
        func()
    except Exception as exc:
        note(f"error_{len([k for k in results if k.startswith('error_')])}", str(exc), f"FAILED: {exc!r}")
        if conn is not None:
            conn.rollback()


if __name__ == "__main__":
    sys.exit(main())

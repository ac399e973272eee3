"""Seeded failure-card sets, shaped like what agents record after a failed run.

The dicts follow ``FailureCard``'s fields in declaration order, and the file is what
the storage writes (``json.dumps(cards, indent=2)``).  Task descriptions are built
from verbs, objects and goals that recur across cards, so keyword overlap (the
``find_matching`` score) is common without being universal.
"""

from __future__ import annotations

import random
from functools import lru_cache

from memstore.sample.vocab import ERROR_NAMES, Vocabulary, uuid_hex, vocabulary, zipf_cum_weights


def _phrases(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split("|"))


CARD_VERBS = _phrases(
    "Fix|Add|Refactor|Speed up|Debug|Migrate|Port|Harden|Document|Clean up|Investigate|Implement|"
    "Stabilise|Rewrite|Cache|Parallelise"
)
CARD_OBJECTS = _phrases(
    "retry logic|cache invalidation|pagination|login flow|CSV export|websocket reconnect|rate limiter|"
    "config loader|database migration|search ranking|file watcher|plugin loader|token refresh|"
    "error reporting|background jobs|upload handler|JSON parser|CLI arguments|session storage|"
    "dependency pins|index rebuild|lock handling|unicode normalisation|timezone conversion|memory catalog|"
    "failure cards|prompt builder|context window budget|git hooks|docker image|test fixtures|"
    "coverage report|logging setup|metrics exporter|schema validation"
)
CARD_GOALS = _phrases(
    "so that flaky tests pass on CI|when the network times out|for large repositories|"
    "after the schema change|without breaking the public API|under concurrent writers|on Windows paths|"
    "with unicode filenames|when the cache is cold|behind the proxy|for the nightly release|"
    "after upgrading dependencies|in the readonly mode|when the disk is full|for monorepo workspaces|"
    "during the database vacuum|when two agents write at once|with symlinked directories|on macOS runners"
)
ERROR_MESSAGES: dict[str, tuple[str, ...]] = {
    "TypeError": _phrases(
        "'NoneType' object is not subscriptable|unsupported operand type(s) for +: 'int' and 'str'|"
        "{stem}() got an unexpected keyword argument 'limit'"
    ),
    "ValueError": _phrases("invalid literal for int() with base 10: '{stem}'|memory content cannot be empty"),
    "KeyError": _phrases("'{stem}'|'memory_id'"),
    "AttributeError": _phrases(
        "'NoneType' object has no attribute '{stem}'|module '{stem}' has no attribute 'load'"
    ),
    "ImportError": _phrases("cannot import name '{stem}' from partially initialized module"),
    "ModuleNotFoundError": _phrases("No module named '{stem}'"),
    "AssertionError": _phrases("assert 3 == 4|expected {stem} to be sorted"),
    "TimeoutError": _phrases("timed out after 30s waiting for {stem}|lock wait exceeded 5000 ms"),
    "sqlite3.OperationalError": _phrases("database is locked|no such table: {stem}|disk I/O error"),
    "FileNotFoundError": _phrases("[Errno 2] No such file or directory: '{path}'"),
    "PermissionError": _phrases("[Errno 13] Permission denied: '{path}'"),
    "JSONDecodeError": _phrases("Expecting value: line 1 column 1 (char 0)|Unterminated string starting at"),
}
DEFAULT_MESSAGES = _phrases("{stem} failed unexpectedly|unexpected state in {stem}")

DAY = 86_400.0
CARD_EPOCH = 1_735_689_600.0  # 2025-01-01T00:00:00Z


@lru_cache(maxsize=1)
def _file_cum_weights() -> list[float]:
    """A few files fail far more often than the rest."""
    return zipf_cum_weights(len(vocabulary().file_paths), 1.1)


def _message(rng: random.Random, error_type: str, vocab: Vocabulary) -> str:
    stem = rng.choice(vocab.code_tokens[:400]).rsplit("/", 1)[-1]
    template = rng.choice(ERROR_MESSAGES.get(error_type, DEFAULT_MESSAGES))
    return template.format(stem=stem, path=rng.choice(vocab.file_paths))


def task_description(rng: random.Random, vocab: Vocabulary | None = None) -> str:
    """A task sentence such as 'Fix retry logic in query when the network times out'."""
    vocab = vocab or vocabulary()
    text = f"{rng.choice(CARD_VERBS)} {rng.choice(CARD_OBJECTS)}"
    if rng.random() < 0.7:
        path = rng.choices(vocab.file_paths, cum_weights=_file_cum_weights())[0]
        text += " in " + path.rsplit("/", 1)[-1].split(".")[0]
    text += f" {rng.choice(CARD_GOALS)}"
    if rng.random() < 0.4:
        text += " (" + " ".join(rng.choices(vocab.words[150:20_000], k=rng.randrange(1, 4))) + ")"
    return text


def card_dicts(count: int, *, seed: int) -> list[dict[str, object]]:
    """``count`` failure-card dicts: ~5% invalidated, ~7% expired, timestamps with ties."""
    vocab = vocabulary()
    rng = random.Random(f"cards:{seed}")
    error_weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(ERROR_NAMES))]
    file_weights = _file_cum_weights()
    cards: list[dict[str, object]] = []
    ids: set[str] = set()
    timestamp = CARD_EPOCH
    run_id = uuid_hex(rng)
    for _ in range(count):
        card_id = f"{rng.getrandbits(32):08x}"
        while card_id in ids:
            card_id = f"{rng.getrandbits(32):08x}"
        ids.add(card_id)
        if rng.random() < 0.2:
            run_id = uuid_hex(rng)
        if rng.random() >= 0.2:  # otherwise share the previous timestamp exactly
            timestamp = round(timestamp + rng.expovariate(1 / 90.0), 6)
        error_type = rng.choices(ERROR_NAMES, weights=error_weights)[0]
        file_path = rng.choices(vocab.file_paths, cum_weights=file_weights)[0]
        roll = rng.random()
        if roll < 0.45:
            expires_at: float | None = None
        elif roll < 0.93:
            expires_at = timestamp + 3650 * DAY
        else:
            expires_at = timestamp + 30 * DAY  # long expired by now
        invalidated = rng.random() < 0.05
        has_evidence = rng.random() < 0.6
        cards.append(
            {
                "id": card_id,
                "run_id": run_id,
                "timestamp": timestamp,
                "error_type": error_type,
                "file_path": file_path,
                "line_number": rng.randrange(1, 900) if rng.random() < 0.9 else None,
                "error_message": _message(rng, error_type, vocab),
                "task_description": task_description(rng, vocab),
                "context_files": rng.sample(vocab.file_paths[:300], rng.randrange(0, 5)),
                "confidence": rng.choices(("low", "medium", "high"), weights=(6, 3, 1))[0],
                "expires_at": expires_at,
                "invalidated": invalidated,
                "invalidation_reason": "file_signature_change" if invalidated else None,
                "warning_behavior": rng.choices(("info", "warning", "block"), weights=(3, 6, 1))[0],
                "reviewer_type": "human" if rng.random() < 0.15 else "auto",
                "evidence_command": f"pytest {file_path} -x" if has_evidence else None,
                "evidence_exit_code": rng.choice((1, 1, 2)) if has_evidence else None,
            }
        )
    return cards

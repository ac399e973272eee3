"""The fixed vocabularies the generator draws from.

Everything here is built from ``VOCAB_SEED`` alone, never from the data seed, so the
query mix can name concrete words (a rare pseudo-word, a tag-heavy word) that mean
the same thing in every generated catalog.
"""

from __future__ import annotations

import itertools
import random
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import itemgetter

VOCAB_SEED = 20261130
WORD_COUNT = 30_000
WORD_ZIPF_EXPONENT = 1.07
TAG_COUNT = 240
TAG_ZIPF_EXPONENT = 1.0


def _split_words(text: str) -> list[str]:
    return text.split()


# The head, most frequent first: everyday English with the words agents write about
# mixed in at plausible ranks.
ENGLISH_HEAD = _split_words(
    """
the of and to a in is that for it on with as was be this by are not or from at
have an but which you all we can they if will has one there more when what been
so were use about would their out also other do into some no them than only then
its may new could our these used first any time should make like how after just
file test code error run now each two where because most such function between
over through value data way both before same set well see call need using while
does change many return build state fix here back even type first line module
case list name path check update issue add when under config version must those
without work new error default read write class next never always again still
second failed since object cache log first value point during three against
found might fail user string memory output input number own method current index
key load own db around result local true false null field query long import api
server client request response open close per within session task agent tool
model prompt context token branch commit merge review patch diff repo script
shell command env variable option flag argument parameter package dependency
install release deploy service worker thread process lock timeout retry queue
event handler callback message payload schema table column row database sqlite
json yaml toml csv parse format encode decode path directory folder entry record
store search match filter sort order limit offset page batch stream buffer chunk
size count total small large fast slow memory disk network socket port host url
http https auth token secret key permission access role admin owner group team
python rust go node typescript react django flask fastapi pytest docker git ci
linux macos windows shell bash zsh vim editor ide plugin extension hook trigger
note remember prefer avoid always never usually sometimes instead rather than
because therefore however although unless whether either neither both several
"""
)

# Short words that make 1- and 2-character queries interesting (``ai``, ``db``, ``x``).
SHORT_WORDS = ["ai", "db", "x", "io", "ui", "os", "id", "ok", "vm", "ip", "qa", "ml", "up", "go", "js"]

SYLLABLES = _split_words(
    "ba be bi bo bu ca ce ci co cu da de di do du fa fe fi fo fu ga ge gi go gu "
    "ha he hi ho hu ja je jo ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu "
    "pa pe pi po pu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo wa we wi "
    "xa xe xi xo za ze zi zo tri tra cal vor ben dex lin mor pex qua sten gral brin "
    "cor dal fen gar hul jin kel lum mar nor pol quin rev sul tor ulm var wix yel zor"
)

# Pseudo-words pinned at chosen ranks so query words have a known frequency.
PINNED_TAIL = {16_000: "caltrivo", 2_500: "benchmarkable", 8_000: "quorvenil"}

ERROR_NAMES = [
    "TypeError",
    "ValueError",
    "KeyError",
    "AttributeError",
    "ImportError",
    "ModuleNotFoundError",
    "AssertionError",
    "IndexError",
    "RuntimeError",
    "FileNotFoundError",
    "PermissionError",
    "TimeoutError",
    "ConnectionError",
    "OSError",
    "NotImplementedError",
    "RecursionError",
    "UnicodeDecodeError",
    "JSONDecodeError",
    "sqlite3.OperationalError",
    "ZeroDivisionError",
    "subprocess.CalledProcessError",
    "asyncio.CancelledError",
    "MemoryError",
    "NameError",
    "SyntaxError",
    "IsADirectoryError",
    "BrokenPipeError",
    "StopIteration",
    "OverflowError",
]

CODE_STEMS = [
    "parse",
    "load",
    "save",
    "read",
    "write",
    "config",
    "index",
    "catalog",
    "entry",
    "search",
    "query",
    "token",
    "cache",
    "retry",
    "backoff",
    "lock",
    "file",
    "path",
    "user",
    "session",
    "request",
    "response",
    "client",
    "server",
    "handler",
    "worker",
    "queue",
    "event",
    "batch",
    "stream",
    "buffer",
    "schema",
    "table",
    "row",
    "column",
    "commit",
    "branch",
    "merge",
    "diff",
    "hash",
    "digest",
    "offset",
    "limit",
    "page",
    "cursor",
    "memory",
    "store",
    "card",
    "failure",
    "plan",
    "mode",
    "tool",
    "agent",
    "prompt",
    "context",
    "model",
    "embed",
    "vector",
    "rank",
    "score",
    "match",
    "filter",
    "sort",
    "format",
    "encode",
    "decode",
    "validate",
    "normalize",
]

PACKAGE_DIRS = ["src", "lib", "app", "tests", "scripts", "tools", "pkg", "internal", "web", "api"]
FILE_EXTS = [".py", ".py", ".py", ".ts", ".tsx", ".rs", ".go", ".js", ".toml", ".yaml", ".md", ".json"]

# Words whose ``str.lower()`` is unusual (İ, final sigma, Kelvin sign, ligatures, ß), plus
# plain accented and non-Latin text, so the index's case handling is exercised.
NON_ASCII_WORDS = [
    "café",
    "naïve",
    "résumé",
    "Straße",
    "Ångström",
    "İstanbul",
    "ΟΔΟΣ",
    "Ελληνικά",
    "σοφός",
    "Москва",
    "данные",
    "ошибка",
    "日本語",
    "東京",
    "検索",
    "한국어",
    "메모리",
    "中文",
    "数据库",
    "ﬁle",
    "Ǆemal",
    "Kelvin",
    "µsec",
    "façade",
    "coöperate",
    "São",
    "Zürich",
    "Kraków",
    "Øresund",
    "Ærø",
    "déjà",
    "niño",
    "piñata",
    "über",
    "Ωmega",
    "ΣΙΣΥΦΟΣ",
    "ﬂow",
    "Ⅻ",
    "①",
    "→",
    "✓",
    "🚀",
    "🐛",
    "emoji🙂",
    "tschüß",
    "İİ",
    "ǅungla",
    "ΐ",
    "ﬃx",
    "Ǉubljana",
    "ẞig",
]

BASE_TAGS = _split_words(
    """
    testing bug ci python api perf refactor docs config security deps sqlite auth frontend backend
    infra agent flaky-test migration windows linux macos rust go typescript react django fastapi
    pytest docker git release cli db search index cache logging memory network timeout encoding
    unicode json yaml style lint types mypy ruff build packaging workflow review oncall incident
    design decision convention gotcha tooling env secrets locking
    """
)

TAG_PREFIXES = ["area", "team", "component", "lang", "svc", "topic", "owner", "epic"]

BONUS_TAGS = ("auto-curated", "run-summary")


def uuid_hex(rng: random.Random) -> str:
    """A uuid4-shaped 32-hex-digit id drawn from a seeded generator."""
    bits = rng.getrandbits(128)
    bits = (bits & ~(0xF << 76)) | (0x4 << 76)
    bits = (bits & ~(0x3 << 62)) | (0x2 << 62)
    return f"{bits:032x}"


def zipf_cum_weights(count: int, exponent: float) -> list[float]:
    """Cumulative weights of a Zipf law over ranks 1..count (for ``random.choices``)."""
    return list(itertools.accumulate(1.0 / (rank**exponent) for rank in range(1, count + 1)))


class Sampler:
    """Weighted draws by table lookup instead of ``random.choices``.

    ``random.choices`` bisects per draw in Python, which alone would take most of a
    minute for the ~45M words of a 1M-entry catalog.  Here frequent items own runs of
    slots in a 65,536-slot table indexed by 16-bit integers (``itemgetter`` does the
    whole batch in C); the long tail shares a block of that table which defers to a
    second, finer table.  Every item keeps its probability to within a few percent.
    """

    HEAD_SLOTS = 1 << 16
    MIN_HEAD_SLOTS = 4

    def __init__(self, items: Sequence[str], cum_weights: Sequence[float], *, tail_bits: int = 22) -> None:
        self.items = tuple(items)
        total = cum_weights[-1]
        probs = [
            (cum - prev) / total for prev, cum in zip([0.0, *cum_weights[:-1]], cum_weights, strict=True)
        ]
        threshold = self.MIN_HEAD_SLOTS / self.HEAD_SLOTS
        head = [(item, p) for item, p in zip(items, probs, strict=True) if p >= threshold]
        tail = [(item, p) for item, p in zip(items, probs, strict=True) if p < threshold]
        tail_mass = sum(p for _, p in tail)
        self.head: list[str | None] = _slot_table([*head, (None, tail_mass)], self.HEAD_SLOTS)
        self.tail: list[str | None] = (
            _slot_table([(item, p / tail_mass) for item, p in tail], 1 << tail_bits) if tail else [None]
        )

    def _tail_one(self, rng: random.Random) -> str:
        item = self.tail[(rng.getrandbits(32) * len(self.tail)) >> 32]
        assert item is not None
        return item

    def one(self, rng: random.Random) -> str:
        item = self.head[rng.getrandbits(16)]
        return item if item is not None else self._tail_one(rng)

    def many(self, rng: random.Random, count: int) -> list[str]:
        """``count`` independent draws."""
        if count < 2:
            return [self.one(rng) for _ in range(count)]
        raw = _uint_array("H", rng.randbytes(2 * count))
        drawn: tuple[str | None, ...] = itemgetter(*raw)(self.head)
        missing = drawn.count(None)
        if not missing:
            return list(drawn)  # type: ignore[arg-type]
        table = self.tail
        size = len(table)
        fill = iter([table[(value * size) >> 32] for value in _uint_array("I", rng.randbytes(4 * missing))])
        return [item if item is not None else next(fill) for item in drawn]  # type: ignore[misc]


def _slot_table(weighted: Sequence[tuple[str | None, float]], slots: int) -> list[str | None]:
    """Give each item a run of slots proportional to its weight, at least one."""
    table: list[str | None] = []
    cumulative = 0.0
    for item, weight in weighted:
        cumulative += weight
        end = max(len(table) + 1, round(cumulative * slots))
        table.extend([item] * (end - len(table)))
    return table


def _uint_array(code: str, data: bytes) -> array[int]:
    """Unsigned integers from random bytes, read little-endian on every platform."""
    values = array(code)
    values.frombytes(data)
    if sys.byteorder == "big":  # pragma: no cover - keeps the generated bytes platform-independent
        values.byteswap()
    return values


def _pseudo_word(rng: random.Random, taken: set[str]) -> str:
    while True:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((2, 2, 3, 3, 3, 4))))
        if word not in taken and len(word) >= 4:
            taken.add(word)
            return word


def _snake(rng: random.Random) -> str:
    return "_".join(rng.sample(CODE_STEMS, rng.choice((2, 2, 3))))


def _kebab(rng: random.Random) -> str:
    return "-".join(rng.sample(CODE_STEMS, rng.choice((2, 3))))


def _camel(rng: random.Random) -> str:
    return "".join(stem.capitalize() for stem in rng.sample(CODE_STEMS, rng.choice((2, 3))))


def _dotted(rng: random.Random) -> str:
    return ".".join(rng.sample(CODE_STEMS, rng.choice((2, 3, 4))))


def _file_path(rng: random.Random) -> str:
    depth = rng.choice((1, 2, 2, 3))
    parts = [rng.choice(PACKAGE_DIRS), *rng.sample(CODE_STEMS, depth)]
    return "/".join(parts) + rng.choice(FILE_EXTS)


def _error_token(rng: random.Random) -> str:
    name = rng.choice(ERROR_NAMES)
    return rng.choice((name, name, name + ":", f"raised {name}", f"{name}({_snake(rng)})"))


@dataclass(frozen=True)
class Vocabulary:
    words: tuple[str, ...]
    word_cum_weights: tuple[float, ...]
    code_tokens: tuple[str, ...]
    code_cum_weights: tuple[float, ...]
    tags: tuple[str, ...]
    tag_cum_weights: tuple[float, ...]
    file_paths: tuple[str, ...]
    mean_word_chars: float
    word_sampler: Sampler
    code_sampler: Sampler
    tag_sampler: Sampler

    def rank_of(self, word: str) -> int:
        return self.words.index(word)


@lru_cache(maxsize=1)
def vocabulary() -> Vocabulary:
    """The one vocabulary every catalog is drawn from (deterministic, built once per process)."""
    rng = random.Random(VOCAB_SEED)
    head: list[str] = []
    seen: set[str] = set()
    for word in ENGLISH_HEAD:
        if word not in seen:
            seen.add(word)
            head.append(word)
    # Short words sit at mid ranks: frequent enough to matter, rare enough to be selective.
    for offset, word in enumerate(SHORT_WORDS):
        if word not in seen:
            seen.add(word)
            head.insert(min(len(head), 60 + offset * 23), word)
    words = list(head)
    while len(words) < WORD_COUNT:
        rank = len(words)
        pinned = PINNED_TAIL.get(rank)
        if pinned is not None:
            seen.add(pinned)
            words.append(pinned)
        else:
            words.append(_pseudo_word(rng, seen))

    makers = (_snake, _snake, _kebab, _camel, _dotted, _file_path, _file_path, _error_token, _error_token)
    code: list[str] = []
    code_seen: set[str] = set()
    while len(code) < 3_000:
        token = rng.choice(makers)(rng)
        if token not in code_seen:
            code_seen.add(token)
            code.append(token)

    tags = list(BASE_TAGS)
    tag_seen = set(tags)
    while len(tags) < TAG_COUNT:
        tag = f"{rng.choice(TAG_PREFIXES)}-{rng.choice(words[40:4000])}"
        if tag not in tag_seen:
            tag_seen.add(tag)
            tags.append(tag)

    files: list[str] = []
    file_seen: set[str] = set()
    while len(files) < 2_000:
        path = _file_path(rng)
        if path not in file_seen:
            file_seen.add(path)
            files.append(path)

    word_weights = zipf_cum_weights(len(words), WORD_ZIPF_EXPONENT)
    total = word_weights[-1]
    previous = 0.0
    mean_chars = 0.0
    for word, cumulative in zip(words, word_weights, strict=True):
        mean_chars += len(word) * (cumulative - previous) / total
        previous = cumulative
    code_weights = zipf_cum_weights(len(code), 1.0)
    tag_weights = zipf_cum_weights(len(tags), TAG_ZIPF_EXPONENT)
    return Vocabulary(
        words=tuple(words),
        word_cum_weights=tuple(word_weights),
        code_tokens=tuple(code),
        code_cum_weights=tuple(code_weights),
        tags=tuple(tags),
        tag_cum_weights=tuple(tag_weights),
        file_paths=tuple(files),
        mean_word_chars=mean_chars,
        word_sampler=Sampler(words, word_weights),
        code_sampler=Sampler(code, code_weights),
        tag_sampler=Sampler(tags, tag_weights),
    )

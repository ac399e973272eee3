"""Review round 23b: defects found attacking the marshal answers, the replayed schema, the proof thread and marks."""

from __future__ import annotations

import marshal
import queue

import pytest

from memstore.index import line_worker

_DIGEST = b"\x01" * 32


def _answer(plain: object) -> object:
    worker = line_worker.LineWorker.__new__(line_worker.LineWorker)
    worker.frames = queue.Queue()
    worker.frames.put(marshal.dumps(plain))
    return worker.answer()


@pytest.mark.parametrize(
    "plain",
    [
        ([], "90", 0, 0, None, None, (0, 90, _DIGEST, ())),  # end not an int
        ([], 90, None, 0, None, None, (0, 90, _DIGEST, ())),  # blank
        ([], 90, 0, 1.5, None, None, (0, 90, _DIGEST, ())),  # corrupt
        ([], 90, 0, 0, [90, 5], 95, (0, 95, _DIGEST, ())),  # tail a list, not a row
        ([], 90, 0, 0, None, "95", (0, 95, _DIGEST, ())),  # tail_end
        ([], 90, 0, 0, None, None, "abcd"),  # seen: four characters unpack into LinesSeen
        ([], 90, 0, 0, None, None, (0, 90, 7, ())),  # seen's digest not bytes
        ([], 90, 0, 0, None, None, (0, 90, _DIGEST, [(1, 2)])),  # skipped a list
        ([], 90, 0, 0, None, None, (0, 90, _DIGEST, ((1, "2"),))),  # a skipped line's end
        ([], True, 0, 0, None, None, None),  # a bool is not an offset
    ],
)
def test_an_answer_with_a_field_of_the_wrong_type_means_the_worker_failed(plain: object) -> None:
    """Only rows were checked: any other field of the wrong type became a ParsedRange whose use
    failed later in the build with an untyped TypeError (a traceback), not a range parsed here."""
    assert _answer(plain) is None


def test_a_well_formed_answer_still_comes_back_whole() -> None:
    row = (0, 40, "m\ud800", "", "", None, 0, None, None, "", "", 1)
    plain = ([row], 41, 1, 2, (41, 5, "t", "x", "", "z", 0, None, None, "", "", 0), 46, (0, 46, _DIGEST, ((3, 9),)))
    parsed = _answer(plain)
    assert parsed is not None
    assert isinstance(parsed, line_worker.ParsedRange)
    assert (parsed.rows, parsed.end, parsed.blank, parsed.corrupt, parsed.tail, parsed.tail_end) == (
        [row],
        41,
        1,
        2,
        plain[4],
        46,
    )
    assert parsed.seen is not None and tuple(parsed.seen) == (0, 46, _DIGEST, ((3, 9),))

"""memstore.checks: the argument checks every public entry point shares, and their wording."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memstore.checks import (
    MAX_LIMIT,
    check_finite_number,
    check_limit,
    check_readonly,
    iterable_list,
    non_empty_str,
    optional_int,
    optional_str,
    require_bool,
    require_mapping,
    require_path,
    require_str,
    str_items,
    str_list,
    wrong_type,
)
from memstore.errors import ArgumentTypeError, InvalidArgumentError, MemstoreError


def test_check_limit() -> None:
    assert check_limit(0) == 0
    assert check_limit(5) == 5
    with pytest.raises(ValueError, match="limit"):
        check_limit(-1)
    for bad in (True, 1.0, "3", None):
        with pytest.raises(TypeError, match="limit"):
            check_limit(bad)


def test_check_limit_clamps_and_names_the_argument() -> None:
    assert check_limit(2**70) == MAX_LIMIT
    with pytest.raises(ArgumentTypeError, match=r"^max_chars must be an int, not float$"):
        check_limit(1.5, name="max_chars")
    with pytest.raises(InvalidArgumentError, match=r"^debounce_ms must be >= 0, got -3$"):
        check_limit(-3, name="debounce_ms")


def test_wrong_type_names_the_type_given() -> None:
    error = wrong_type("root must be a str or Path", 3)
    assert isinstance(error, ArgumentTypeError) and isinstance(error, TypeError) and isinstance(error, MemstoreError)
    assert str(error) == "root must be a str or Path, not int"
    single = wrong_type("names must be tool names", b"x", single=True)
    assert str(single) == "names must be tool names, not a single bytes"


@pytest.mark.parametrize(
    ("check", "good", "bad", "message"),
    [
        (require_str, "x", 1, "arg must be a str, not int"),
        (optional_str, None, b"x", "arg must be a str or None, not bytes"),
        (require_bool, False, 0, "arg must be a bool, not int"),
        (optional_int, None, True, "arg must be an int or None, not bool"),
        (optional_int, 7, 7.0, "arg must be an int or None, not float"),
        (require_mapping, {}, [], "arg must be a mapping, not list"),
        (str_list, ("a",), "a", "arg must be a list of str, not str"),
        (str_list, ["a"], {"a"}, "arg must be a list of str, not set"),
        (str_list, [], ["a", 2], "arg must contain only str, got int"),
        (str_items, iter(["a"]), "ab", "arg must be an iterable of str, not a single string"),
        (str_items, ("a",), 5, "arg must be an iterable of str, not int"),
        (str_items, {"a"}, [None], "arg must contain only str, got NoneType"),
    ],
)
def test_each_check_accepts_its_type_and_words_the_refusal(
    check: Callable[[str, object], object], good: object, bad: object, message: str
) -> None:
    check("arg", good)
    with pytest.raises(ArgumentTypeError) as info:
        check("arg", bad)
    assert str(info.value) == message


def test_checks_return_what_they_accepted() -> None:
    assert require_str("a", "x") == "x"
    assert optional_str("a", None) is None
    assert optional_int("a", 3) == 3
    assert require_path("root", "some/where") == Path("some/where")
    assert str_items("tags", (t for t in ("b", "a"))) == ["b", "a"]
    assert str_list("paths", ("p",)) == ["p"]
    assert iterable_list("x", range(3)) == [0, 1, 2]
    assert check_readonly(True) is True


def test_non_empty_str_strips_and_refuses_blank() -> None:
    assert non_empty_str("id", "  abc \n") == "abc"
    with pytest.raises(InvalidArgumentError, match=r"^id cannot be empty$"):
        non_empty_str("id", " \t ")
    with pytest.raises(ArgumentTypeError, match=r"^id must be a str, not NoneType$"):
        non_empty_str("id", None)


def test_require_path_accepts_path_like() -> None:
    assert require_path("root", Path("/tmp")) == Path("/tmp")
    with pytest.raises(ArgumentTypeError, match=r"^root must be a str or Path, not int$"):
        require_path("root", 5)


def test_check_readonly_keeps_its_short_message() -> None:
    with pytest.raises(ArgumentTypeError, match=r"^readonly must be a bool$"):
        check_readonly("yes")


def test_iterable_list_takes_a_custom_wanted_phrase() -> None:
    with pytest.raises(ArgumentTypeError, match=r"^paths must be a collection of str, not a single string$"):
        iterable_list("paths", "abc", wanted="a collection of str")
    with pytest.raises(ArgumentTypeError, match=r"^paths must be a collection of str, not float$"):
        iterable_list("paths", 1.0, wanted="a collection of str")


def test_a_type_error_raised_while_iterating_is_not_reworded() -> None:
    def broken() -> Iterator[str]:
        yield "a"
        raise TypeError("a bug inside the caller's generator")

    with pytest.raises(TypeError, match="inside the caller"):
        str_items("tags", broken())


def test_check_finite_number() -> None:
    assert check_finite_number("t", 3) == 3.0
    assert check_finite_number("t", 2.5) == 2.5
    with pytest.raises(ArgumentTypeError, match=r"^t must be a number, not bool$"):
        check_finite_number("t", True)
    with pytest.raises(ArgumentTypeError, match=r"^t must be a number, not str$"):
        check_finite_number("t", "1")
    with pytest.raises(InvalidArgumentError, match=r"^t is too large for a float$"):
        check_finite_number("t", 10**400)
    for value in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(InvalidArgumentError, match=r"^t must be finite"):
            check_finite_number("t", value)

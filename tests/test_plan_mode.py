from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstore.errors import ArgumentTypeError, EmptyContentError, MemstoreError
from memstore.plan_mode import BLOCKED_TOOLS, PlanMode, PlanModeError, PlanModeState

S = PlanModeState


def test_states_are_an_enum() -> None:
    assert {s.name for s in PlanModeState} == {"DISABLED", "ENABLED", "CONFIRMING"}
    assert PlanMode().state is S.DISABLED
    assert issubclass(PlanModeError, MemstoreError)


def test_exit_with_notes_needs_confirmation() -> None:
    plan = PlanMode()
    plan.enable()
    assert plan.is_enabled()
    plan.add_note("  found the bug in parser.py  ")
    assert plan.notes == ("found the bug in parser.py",)
    assert plan.disable() is S.CONFIRMING
    assert plan.is_enabled()
    plan.add_note("one more")
    plan.cancel_exit()
    assert plan.state is S.ENABLED
    assert plan.disable() is S.CONFIRMING
    plan.confirm_exit()
    assert plan.state is S.DISABLED
    assert not plan.is_enabled()
    assert plan.notes == ("found the bug in parser.py", "one more")
    plan.enable()
    assert plan.notes == ()


def test_exit_without_notes_or_without_confirmation() -> None:
    plan = PlanMode()
    plan.enable()
    assert plan.disable() is S.DISABLED
    plan.enable()
    plan.add_note("x")
    assert plan.disable(require_confirmation=False) is S.DISABLED


@pytest.mark.parametrize("state", list(PlanModeState))
def test_force_disable_from_any_state(state: PlanModeState) -> None:
    plan = _in_state(state)
    plan._force_disable()
    assert plan.state is S.DISABLED


def _in_state(state: PlanModeState) -> PlanMode:
    plan = PlanMode()
    if state is not S.DISABLED:
        plan.enable()
        plan.add_note("note")
    if state is S.CONFIRMING:
        plan.disable()
    assert plan.state is state
    return plan


INVALID = [
    (S.DISABLED, "disable"),
    (S.DISABLED, "confirm_exit"),
    (S.DISABLED, "cancel_exit"),
    (S.DISABLED, "add_note"),
    (S.ENABLED, "enable"),
    (S.ENABLED, "confirm_exit"),
    (S.ENABLED, "cancel_exit"),
    (S.CONFIRMING, "enable"),
    (S.CONFIRMING, "disable"),
]


@pytest.mark.parametrize(("state", "action"), INVALID)
def test_invalid_transitions_raise_and_change_nothing(state: PlanModeState, action: str) -> None:
    plan = _in_state(state)
    notes = plan.notes
    with pytest.raises(PlanModeError):
        if action == "add_note":
            plan.add_note("x")
        else:
            getattr(plan, action)()
    assert plan.state is state
    assert plan.notes == notes


def test_add_note_argument_errors() -> None:
    plan = PlanMode()
    plan.enable()
    with pytest.raises(EmptyContentError):
        plan.add_note("   ")
    with pytest.raises(ArgumentTypeError):
        plan.add_note(None)  # type: ignore[arg-type]
    assert plan.notes == ()


@pytest.mark.parametrize(
    "tool",
    [
        "write_file",
        "edit_file",
        "apply_patch",
        "delete_file",
        "run_shell",
        "bash",
        "shell",
        "execute_command",
        "Write_File",
        " BASH ",
        "edit-file",
        "git_commit",
    ],
)
def test_write_and_shell_tools_blocked_while_active(tool: str) -> None:
    assert PlanMode().can_execute_tool(tool)[0] is True
    for state in (S.ENABLED, S.CONFIRMING):
        allowed, reason = _in_state(state).can_execute_tool(tool)
        assert allowed is False
        assert tool in reason


@pytest.mark.parametrize(
    "tool", ["read_file", "list_directory", "grep", "search", "glob", "view", "git_diff"]
)
def test_read_tools_allowed_while_active(tool: str) -> None:
    for state in PlanModeState:
        allowed, reason = _in_state(state).can_execute_tool(tool)
        assert allowed is True
        assert reason


def test_blocked_list_is_normalised() -> None:
    assert all(name == name.strip().lower() and "-" not in name for name in BLOCKED_TOOLS)


def test_tool_name_type() -> None:
    with pytest.raises(ArgumentTypeError):
        PlanMode().can_execute_tool(3)  # type: ignore[arg-type]


ACTIONS = ["enable", "add_note", "disable", "disable_now", "confirm_exit", "cancel_exit", "force"]


@given(st.lists(st.sampled_from(ACTIONS), max_size=40))
def test_matches_reference_model(actions: list[str]) -> None:
    plan = PlanMode()
    state, notes = "DISABLED", 0
    for action in actions:
        expected: tuple[str, int] | None
        if action == "enable":
            expected = ("ENABLED", 0) if state == "DISABLED" else None
        elif action == "add_note":
            expected = (state, notes + 1) if state != "DISABLED" else None
        elif action == "disable":
            expected = (("CONFIRMING" if notes else "DISABLED"), notes) if state == "ENABLED" else None
        elif action == "disable_now":
            expected = ("DISABLED", notes) if state == "ENABLED" else None
        elif action == "confirm_exit":
            expected = ("DISABLED", notes) if state == "CONFIRMING" else None
        elif action == "cancel_exit":
            expected = ("ENABLED", notes) if state == "CONFIRMING" else None
        else:
            expected = ("DISABLED", notes)
        call = {
            "enable": plan.enable,
            "add_note": lambda: plan.add_note("n"),
            "disable": plan.disable,
            "disable_now": lambda: plan.disable(require_confirmation=False),
            "confirm_exit": plan.confirm_exit,
            "cancel_exit": plan.cancel_exit,
            "force": plan._force_disable,
        }[action]
        if expected is None:
            with pytest.raises(PlanModeError):
                call()
        else:
            call()
            state, notes = expected
        assert plan.state.name == state
        assert len(plan.notes) == notes
        assert plan.can_execute_tool("write_file")[0] is (state == "DISABLED")


def test_concurrent_notes_all_kept() -> None:
    plan = PlanMode()
    plan.enable()
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        barrier.wait()
        for i in range(200):
            plan.add_note(f"{n}-{i}")
            plan.can_execute_tool("bash")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(plan.notes) == sorted(f"{n}-{i}" for n in range(8) for i in range(200))

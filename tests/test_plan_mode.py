from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstore.errors import ArgumentTypeError, EmptyContentError, MemstoreError
from memstore.plan_mode import (
    READ_WORDS,
    SAFE_WORDS,
    WRITE_WORDS,
    PlanMode,
    PlanModeError,
    PlanModeState,
    is_read_only_tool,
    tool_words,
)

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


READ_TOOLS = [
    "read_file",
    "list_directory",
    "grep",
    "search",
    "glob",
    "view",
    "git_diff",
    "git_status",
    "git-log-show",
    "workspace_read_file",
    "workspace_list_directory",
    "workspace_search",
    "mcp__filesystem__read_file",
    "mcp__filesystem__read_multiple_files",
    "mcp__filesystem__list_directory",
    "mcp__filesystem__directory_tree",
    "mcp__filesystem__search_files",
    "mcp__filesystem__get_file_info",
    "mcp__filesystem__list_allowed_directories",
    "mcp__my-server__readFile",
    "Read",
    "LS",
    "Glob",
    "Grep",
    "NotebookRead",
    "WebSearch",
    "codebase_search",
    "grep_search",
    "file_search",
    "list_dir",
    "cat",
    "head",
    "tail",
    "find_files",
    "show_file",
    " Read-File ",
]


@pytest.mark.parametrize("tool", READ_TOOLS)
def test_read_tools_allowed_while_active(tool: str) -> None:
    assert is_read_only_tool(tool)
    for state in PlanModeState:
        allowed, reason = _in_state(state).can_execute_tool(tool)
        assert allowed is True
        assert repr(tool) in reason or state is S.DISABLED


ISSUE_WRITE_TOOLS = [
    # the reference agent's own write tools
    "workspace_write_file",
    "workspace_apply_patch",
    "workspace_edit_at_hash",
    "workspace_create_directory",
    "workspace_delete",
    "workspace_run_shell_mutate",
    "process",
    # common ones of other agents
    "str_replace_based_edit_tool",
    "write_to_file",
    "replace_in_file",
    "run_terminal_cmd",
    "run_in_terminal",
    "mcp__filesystem__write_file",
    "write_file",
    "shell",
]
MUTATING_LOOKALIKES = [
    "git_commit",
    "read_and_delete",
    "list_and_remove",
    "search_replace",
    "find_and_replace",
    "get_or_create",
    "readFileAndWrite",
    "ReadThenEdit",
    "view.update",
    "mcp__filesystem__edit_file",
    "mcp__filesystem__move_file",
    "mcp__filesystem__create_directory",
    "mcp__shell__read_output",
    "git_push",
    "git_checkout",
    "MultiEdit",
    "TodoWrite",
    "NotebookEdit",
    "Bash",
]
UNKNOWN_TOOLS = [
    "frobnicate",
    "",
    "   ",
    "think",
    "web_fetch",
    "git_fetch",
    "readme",
    "reader",
    "showcase",
    "listen",
    "getaway",
    "catapult",
    "unread",
    "files",
    "git",
    "mcp__github__get_issue",
    "read_fileé",
    "rеad_file",  # a Cyrillic е
    "ＲＥＡＤ",
    "read_file_v2",
]


@pytest.mark.parametrize("tool", ISSUE_WRITE_TOOLS + MUTATING_LOOKALIKES + UNKNOWN_TOOLS)
def test_writes_lookalikes_and_unknown_names_blocked_while_active(tool: str) -> None:
    assert PlanMode().can_execute_tool(tool) == (True, "plan mode is disabled")
    assert not is_read_only_tool(tool)
    for state in (S.ENABLED, S.CONFIRMING):
        allowed, reason = _in_state(state).can_execute_tool(tool)
        assert allowed is False
        assert repr(tool) in reason
        assert state.value in reason


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ("workspace_run_shell_mutate", "a change or a command ('run')"),
        ("read_and_delete", "a change or a command ('delete')"),
        ("mcp__github__get_issue", "unknown word 'issue'"),
        ("files", "no read word"),
    ],
)
def test_block_reason_says_why(tool: str, why: str) -> None:
    assert why in _in_state(S.ENABLED).can_execute_tool(tool)[1]


def test_mcp_server_name_need_not_be_known_but_is_checked_for_writes() -> None:
    assert is_read_only_tool("mcp__acme_tracker__list_files")
    assert not is_read_only_tool("acme_tracker_list_files")
    assert not is_read_only_tool("mcp__deploy_bot__list_files")


def test_host_allow_list_extends_the_read_tools() -> None:
    plan = PlanMode(allow_tools=["think", "Web-Fetch", "mcp__github__get_issue"])
    plan.enable()
    for tool in ("think", "web_fetch", "WEB FETCH", "mcp__github__get_issue"):
        allowed, reason = plan.can_execute_tool(tool)
        assert allowed is True
        assert "allow list" in reason
    assert plan.can_execute_tool("read_file")[0] is True
    assert plan.can_execute_tool("write_file")[0] is False
    assert plan.can_execute_tool("frobnicate")[0] is False
    assert plan.allow_tools == frozenset({"think", "web_fetch", "mcp__github__get_issue"})


def test_host_deny_list_blocks_read_tools_and_wins_over_allow() -> None:
    plan = PlanMode(allow_tools=["think", "grep"], deny_tools=["read_file", "GREP"])
    plan.enable()
    for tool in ("read_file", "Read-File", "grep"):
        allowed, reason = plan.can_execute_tool(tool)
        assert allowed is False
        assert "deny list" in reason
    assert plan.can_execute_tool("think")[0] is True
    assert plan.can_execute_tool("list_directory")[0] is True
    plan.disable()
    assert plan.can_execute_tool("read_file")[0] is True


@pytest.mark.parametrize(
    ("denied", "spelling"),
    [
        ("Read", "Read."),
        ("Read", ".Read"),
        ("web_search", "webSearch"),
        ("web_search", "web.search"),
        ("web_search", "web/search"),
        ("web_search", "web\tsearch"),
        ("web_search", "web__search"),
        ("mcp__evil__read_file", "mcp__evil__readFile"),
        ("mcp__evil__read_file", "mcp__evil__read:file"),
    ],
)
def test_a_denied_tool_is_blocked_under_every_spelling_the_rule_reads_as_the_same_words(
    denied: str, spelling: str
) -> None:
    """The built-in rule reads these spellings as the denied name's words, so the deny list must too."""
    plan = PlanMode(deny_tools=[denied])
    plan.enable()
    allowed, reason = plan.can_execute_tool(spelling)
    assert allowed is False
    assert "deny list" in reason


@pytest.mark.parametrize("bad", ["read_file", b"read_file", 3, [3], ("ok", None)])
def test_host_lists_are_checked(bad: object) -> None:
    with pytest.raises(ArgumentTypeError):
        PlanMode(allow_tools=bad)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError):
        PlanMode(deny_tools=bad)  # type: ignore[arg-type]


def test_host_lists_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        PlanMode(["think"])  # type: ignore[misc]


def test_word_sets_are_disjoint_lowercase_words() -> None:
    assert not WRITE_WORDS & (READ_WORDS | SAFE_WORDS)
    for word in WRITE_WORDS | READ_WORDS | SAFE_WORDS:
        assert tool_words(word) == (word,)


def test_tool_words_split_on_separators_and_humps() -> None:
    assert tool_words("mcp__filesystem__readFile") == ("mcp", "filesystem", "read", "file")
    assert tool_words("LSTool") == ("ls", "tool")
    assert tool_words(" git-diff.v2/Show ") == ("git", "diff", "v2", "show")
    assert tool_words("read_fileé") == ("read", "fileé")


SEPARATORS = st.sampled_from(["_", "-", " ", "__", ".", "/", ":", " - "])
KNOWN_WORDS = sorted(READ_WORDS | SAFE_WORDS)


def _cased(word: str, how: str) -> str:
    return {"lower": word, "upper": word.upper(), "title": word.title()}[how]


@st.composite
def tool_names(draw: st.DrawFn, *, extra: st.SearchStrategy[str], mcp: bool = True) -> str:
    """A name of known words, random words and one word drawn from ``extra``, in random case.

    With ``mcp`` the name may be an MCP name, whose server part can be any word.
    """
    known = KNOWN_WORDS if mcp else [word for word in KNOWN_WORDS if word != "mcp"]
    filler = st.one_of(st.sampled_from(known), st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True))
    words = draw(st.lists(filler, max_size=5))
    words.insert(draw(st.integers(0, len(words))), draw(extra))
    cases = st.sampled_from(["lower", "upper", "title"])
    text = words[0]
    for word in words[1:]:
        text += draw(SEPARATORS) + _cased(word, draw(cases))
    return draw(st.sampled_from(["", "mcp__", "mcp__server__"] if mcp else [""])) + text


@given(tool_names(extra=st.sampled_from(sorted(WRITE_WORDS))), st.sampled_from([S.ENABLED, S.CONFIRMING]))
def test_any_name_with_a_write_word_is_blocked(name: str, state: PlanModeState) -> None:
    allowed, reason = _in_state(state).can_execute_tool(name)
    assert allowed is False
    assert "a change or a command" in reason


@given(
    st.lists(st.sampled_from(KNOWN_WORDS), max_size=4),
    st.sampled_from(sorted(READ_WORDS)),
    SEPARATORS,
)
def test_names_of_known_read_words_are_allowed(words: list[str], read: str, separator: str) -> None:
    name = separator.join([*words, read])
    assert _in_state(S.ENABLED).can_execute_tool(name)[0] is True


@given(tool_names(extra=st.from_regex(r"[a-z]{1,10}", fullmatch=True), mcp=False))
def test_a_name_with_an_unknown_word_is_blocked(name: str) -> None:
    if all(word in READ_WORDS or word in SAFE_WORDS for word in tool_words(name)):
        return
    assert _in_state(S.ENABLED).can_execute_tool(name)[0] is False


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


@pytest.mark.parametrize("tool", ["memory_recall", "failure_cards_match", "pins_list", "team_notes"])
def test_memstores_own_read_tools_are_allowed_in_plan_mode(tool: str) -> None:
    plan = PlanMode()
    plan.enable()
    assert plan.can_execute_tool(tool)[0] is True
    assert plan.can_execute_tool(f"mcp__memstore__{tool}")[0] is True


def test_memstores_read_tool_list_is_exactly_the_mcp_tools_marked_read_only() -> None:
    from memstore.mcp_tools import TOOLS
    from memstore.plan_mode import MEMSTORE_READ_TOOLS

    assert {spec.name for spec in TOOLS if spec.read_only} == MEMSTORE_READ_TOOLS
    plan = PlanMode()
    plan.enable()
    for spec in TOOLS:
        assert plan.can_execute_tool(spec.name)[0] is spec.read_only, spec.name

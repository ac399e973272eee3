"""Plan mode: a read-only phase in which an agent investigates and records findings.

State machine (spec.md)::

    DISABLED --enable()--> ENABLED --disable() [notes, confirmation required]--> CONFIRMING
    ENABLED --disable() [no notes, or require_confirmation=False]--> DISABLED
    CONFIRMING --confirm_exit()--> DISABLED      CONFIRMING --cancel_exit()--> ENABLED
    any --_force_disable()--> DISABLED

Any other call is an invalid transition and raises :class:`PlanModeError`; in
particular ``enable()`` while already active raises instead of silently wiping the
notes.  Plan mode counts as enabled (``is_enabled()``) in ENABLED and CONFIRMING:
until the exit is confirmed tools stay blocked and notes can still be added.
Notes survive ``disable()`` (callers read them after exiting) and are cleared by
the next ``enable()``.

Tools fail closed.  While plan mode is active ``can_execute_tool`` allows a tool only
when it is known to be read-only, in this order:

1. a name on the host's ``deny_tools`` is blocked;
2. a name on the host's ``allow_tools`` is allowed;
3. otherwise the built-in rule of :func:`is_read_only_tool` decides, and every
   name it does not know (including any unknown word) is blocked.

The built-in rule reads the name as words (split at ``_``, ``-``, ``.``, ``/``,
spaces and other ASCII punctuation, and at camelCase humps: ``NotebookRead`` is
``notebook read``) and judges whole words, never substrings, so ``readme_viewer``
is not ``read``.  A name is read-only when none of its words is in
:data:`WRITE_WORDS`, every word is in :data:`READ_WORDS` or :data:`SAFE_WORDS`,
and at least one is in :data:`READ_WORDS`.  In an MCP name
``mcp__<server>__<tool>`` only the tool part must be known (server names are
arbitrary), but a write word anywhere still blocks it.

Only the name is judged; the arguments are not.  A tool that reads or writes
depending on its arguments (``str_replace_based_edit_tool`` with ``command=view``
or ``command=create``) is therefore blocked: a host that wants its read commands
during plan mode checks the command itself, or offers them under a read-only name.
The rule also trusts a tool's name to describe what it does; a host running tools
it does not trust lists them in ``deny_tools``.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Iterable

from memstore.checks import iterable_list, require_str, wrong_type
from memstore.errors import EmptyContentError, MemstoreError

READ_WORDS: frozenset[str] = frozenset(
    {
        "read",
        "list",
        "search",
        "grep",
        "glob",
        "view",
        "show",
        "find",
        "get",
        "ls",
        "cat",
        "head",
        "tail",
        "stat",
        "status",
        "diff",
        "blame",
        "tree",
        "lookup",
        "locate",
        "inspect",
        "describe",
        "explain",
        "count",
        "peek",
        "preview",
        "outline",
        "listdir",
        "readdir",
        "readlink",
        "realpath",
        "pwd",
    }
)
"""Words that name a query: a tool needs one of them to count as read-only."""

SAFE_WORDS: frozenset[str] = frozenset(
    {
        # what is read
        "file",
        "files",
        "filename",
        "filenames",
        "dir",
        "dirs",
        "directory",
        "directories",
        "folder",
        "folders",
        "path",
        "paths",
        "text",
        "content",
        "contents",
        "line",
        "lines",
        "range",
        "code",
        "codebase",
        "source",
        "symbol",
        "symbols",
        "definition",
        "definitions",
        "reference",
        "references",
        "usages",
        "info",
        "metadata",
        "details",
        "structure",
        "notebook",
        "cell",
        "cells",
        "memory",
        "memories",
        "note",
        "notes",
        "todo",
        "todos",
        "errors",
        "diagnostics",
        "problems",
        "log",
        "logs",
        "history",
        "changes",
        "branches",
        "commits",
        "tags",
        "entries",
        "web",
        # where it is read from
        "workspace",
        "project",
        "repo",
        "repository",
        "filesystem",
        "fs",
        "git",
        "mcp",
        # how
        "multiple",
        "many",
        "all",
        "allowed",
        "recent",
        "semantic",
        "regex",
        "pattern",
        "hash",
        "by",
        "in",
        "for",
        "of",
        "at",
        "and",
        "tool",
    }
)
"""Words that may accompany a read word in a read-only tool's name."""

MEMSTORE_READ_TOOLS: frozenset[str] = frozenset(
    {
        "memory_search",
        "memory_recall",
        "memory_list",
        "memory_show",
        "memory_status",
        "failure_cards_match",
        "pins_list",
        "team_notes",
    }
)
"""memstore's own read-only MCP tools (``memstore mcp``): an agent in plan mode may consult its
memory.  Kept equal to the tools that mcp_tools marks read-only (a test checks it)."""

WRITE_WORDS: frozenset[str] = frozenset(
    {
        # files
        "write",
        "edit",
        "multiedit",
        "create",
        "delete",
        "del",
        "remove",
        "rm",
        "rmdir",
        "unlink",
        "move",
        "mv",
        "rename",
        "copy",
        "cp",
        "mkdir",
        "make",
        "touch",
        "insert",
        "update",
        "upsert",
        "replace",
        "patch",
        "apply",
        "put",
        "post",
        "set",
        "save",
        "store",
        "add",
        "append",
        "prepend",
        "truncate",
        "clear",
        "purge",
        "drop",
        "modify",
        "change",
        "mutate",
        "format",
        "fix",
        "refactor",
        "undo",
        "redo",
        "revert",
        "restore",
        "chmod",
        "chown",
        "link",
        "symlink",
        "ln",
        "upload",
        "download",
        "send",
        # version control
        "commit",
        "push",
        "pull",
        "merge",
        "rebase",
        "reset",
        "checkout",
        "switch",
        "stash",
        "tag",
        "clone",
        "init",
        # commands and processes
        "run",
        "exec",
        "execute",
        "eval",
        "shell",
        "bash",
        "sh",
        "zsh",
        "cmd",
        "command",
        "terminal",
        "process",
        "spawn",
        "kill",
        "start",
        "stop",
        "restart",
        "install",
        "uninstall",
        "deploy",
        "python",
        "node",
        "script",
    }
)
"""Words that name a change or a command: a name holding one is never read-only."""

_MCP_PREFIX = "mcp"
_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]+")
"""ASCII characters other than letters and digits; other characters stay inside words (and make them unknown)."""


class PlanModeState(enum.Enum):
    DISABLED = "disabled"
    ENABLED = "enabled"
    CONFIRMING = "confirming"


class PlanModeError(MemstoreError, RuntimeError):
    """A plan-mode call that the current state does not allow."""


def normalize_tool_name(name: str) -> str:
    """The form in which host lists and tool names are compared."""
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def tool_words(name: str) -> tuple[str, ...]:
    """The lowercase words of a tool name: ``mcp__fs__readFile`` -> ``('mcp', 'fs', 'read', 'file')``."""
    return tuple(word.lower() for word in _SEPARATORS.split(_HUMP.sub("_", name)) if word)


def _tool_part(name: str) -> str:
    """The tool's own name: in ``mcp__<server>__<tool>`` the part after the server."""
    parts = name.strip().split("__")
    if len(parts) >= 3 and parts[0].lower() == _MCP_PREFIX:
        return "__".join(parts[2:])
    return name


def _judge(name: str) -> tuple[bool, str]:
    """``(read_only, why)`` by the built-in rule."""
    for word in tool_words(name):
        if word in WRITE_WORDS:
            return False, f"names a change or a command ({word!r})"
    if normalize_tool_name(_tool_part(name)) in MEMSTORE_READ_TOOLS:
        return True, "is one of memstore's own read-only tools"
    words = tool_words(_tool_part(name))
    for word in words:
        if word not in READ_WORDS and word not in SAFE_WORDS:
            return False, f"is not known to be read-only (unknown word {word!r})"
    reads = [word for word in words if word in READ_WORDS]
    if not reads:
        return False, "is not known to be read-only (no read word such as read, list or search)"
    return True, f"is read-only ({reads[0]!r})"


def is_read_only_tool(name: str) -> bool:
    """Whether the built-in rule knows ``name`` to be read-only (host lists aside)."""
    return _judge(require_str("name", name))[0]


def _tool_set(option: str, names: Iterable[str]) -> frozenset[str]:
    if isinstance(names, str | bytes):
        raise wrong_type(f"{option} must be an iterable of tool names", names, single=True)
    keys: set[str] = set()
    for item in iterable_list(option, names, wanted="an iterable of tool names"):
        if not isinstance(item, str):
            raise wrong_type(f"{option} must hold str names", item)
        keys.add(normalize_tool_name(item))
    return frozenset(keys)


class PlanMode:
    """Thread-safe plan-mode state with the notes gathered while it is active.

    ``allow_tools`` names tools the host knows to be read-only beyond the built-in
    rule; ``deny_tools`` names tools blocked while plan mode is active even when
    they look read-only (deny wins).  Both are compared after
    :func:`normalize_tool_name`; a denied name is also blocked under every spelling
    with the same :func:`tool_words` (``webSearch``, ``web.search``), since the
    built-in rule would read those as the same name.
    """

    def __init__(self, *, allow_tools: Iterable[str] = (), deny_tools: Iterable[str] = ()) -> None:
        self._allow = _tool_set("allow_tools", allow_tools)
        self._deny = _tool_set("deny_tools", deny_tools)
        # The rule reads "readFile", "read.file" and "read_file" as one name, so the deny list must too.
        self._deny_words = frozenset(tool_words(name) for name in self._deny)
        self._lock = threading.Lock()
        self._state = PlanModeState.DISABLED
        self._notes: list[str] = []

    @property
    def allow_tools(self) -> frozenset[str]:
        return self._allow

    @property
    def deny_tools(self) -> frozenset[str]:
        return self._deny

    @property
    def state(self) -> PlanModeState:
        with self._lock:
            return self._state

    @property
    def notes(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._notes)

    def is_enabled(self) -> bool:
        with self._lock:
            return self._state is not PlanModeState.DISABLED

    def _expect(self, allowed: PlanModeState, action: str) -> None:
        if self._state is not allowed:
            raise PlanModeError(f"cannot {action} while plan mode is {self._state.value}")

    def enable(self) -> None:
        """Enter plan mode with no notes."""
        with self._lock:
            self._expect(PlanModeState.DISABLED, "enable plan mode")
            self._notes.clear()
            self._state = PlanModeState.ENABLED

    def add_note(self, text: str) -> None:
        note = require_str("text", text).strip()
        if not note:
            raise EmptyContentError("plan note cannot be empty")
        with self._lock:
            if self._state is PlanModeState.DISABLED:
                raise PlanModeError("cannot add a note while plan mode is disabled")
            self._notes.append(note)

    def disable(self, *, require_confirmation: bool = True) -> PlanModeState:
        """Leave plan mode, or ask for confirmation first when there are notes; returns the new state."""
        with self._lock:
            self._expect(PlanModeState.ENABLED, "disable plan mode")
            if self._notes and require_confirmation:
                self._state = PlanModeState.CONFIRMING
            else:
                self._state = PlanModeState.DISABLED
            return self._state

    def confirm_exit(self) -> None:
        with self._lock:
            self._expect(PlanModeState.CONFIRMING, "confirm exit")
            self._state = PlanModeState.DISABLED

    def cancel_exit(self) -> None:
        with self._lock:
            self._expect(PlanModeState.CONFIRMING, "cancel exit")
            self._state = PlanModeState.ENABLED

    def _force_disable(self) -> None:
        """Leave plan mode from any state (governance's emergency exit); never raises."""
        with self._lock:
            self._state = PlanModeState.DISABLED

    def can_execute_tool(self, name: str) -> tuple[bool, str]:
        """``(allowed, reason)`` for running tool ``name`` in the current state."""
        require_str("name", name)
        state = self.state
        if state is PlanModeState.DISABLED:
            return True, "plan mode is disabled"
        key = normalize_tool_name(name)
        if key in self._deny or tool_words(name) in self._deny_words:
            return False, f"tool {name!r} is on the host's deny list; blocked while plan mode is {state.value}"
        if key in self._allow:
            return True, f"tool {name!r} is on the host's allow list; allowed in plan mode"
        read_only, why = _judge(name)
        if read_only:
            return True, f"tool {name!r} {why}; allowed in plan mode"
        return False, f"tool {name!r} {why}; blocked while plan mode is {state.value}"

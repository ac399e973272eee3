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

``can_execute_tool`` blocks the tools in :data:`BLOCKED_TOOLS` while plan mode is
active and allows every other tool.  Names are compared after stripping,
lowercasing and turning ``-`` and spaces into ``_``.
"""

from __future__ import annotations

import enum
import threading

from memstore.errors import ArgumentTypeError, EmptyContentError, MemstoreError

BLOCKED_TOOLS: frozenset[str] = frozenset(
    {
        # file writes and edits
        "write",
        "write_file",
        "create_file",
        "edit",
        "edit_file",
        "multi_edit",
        "multiedit",
        "str_replace",
        "str_replace_editor",
        "insert",
        "apply_patch",
        "apply_diff",
        "patch",
        "notebook_edit",
        "notebookedit",
        "delete_file",
        "remove_file",
        "move_file",
        "rename_file",
        "copy_file",
        "create_directory",
        "mkdir",
        # commands
        "bash",
        "shell",
        "sh",
        "run_shell",
        "run_command",
        "execute_command",
        "exec",
        "terminal",
        "python",
        "run_python",
        # version control that changes state
        "git_commit",
        "git_push",
        "git_checkout",
        "git_reset",
    }
)
"""Tools that write, edit, delete or execute; blocked while plan mode is active."""


class PlanModeState(enum.Enum):
    DISABLED = "disabled"
    ENABLED = "enabled"
    CONFIRMING = "confirming"


class PlanModeError(MemstoreError, RuntimeError):
    """A plan-mode call that the current state does not allow."""


def normalize_tool_name(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


class PlanMode:
    """Thread-safe plan-mode state with the notes gathered while it is active."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = PlanModeState.DISABLED
        self._notes: list[str] = []

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
        if not isinstance(text, str):
            raise ArgumentTypeError(f"text must be a str, not {type(text).__name__}")
        note = text.strip()
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
        if not isinstance(name, str):
            raise ArgumentTypeError(f"name must be a str, not {type(name).__name__}")
        state = self.state
        if state is PlanModeState.DISABLED:
            return True, "plan mode is disabled"
        if normalize_tool_name(name) in BLOCKED_TOOLS:
            return (
                False,
                f"tool {name!r} writes files or runs commands; blocked while plan mode is {state.value}",
            )
        return True, f"tool {name!r} is allowed in plan mode"

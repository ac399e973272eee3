"""The MCP server's tools: names, input schemas, descriptions and the library call behind each.

No MCP SDK here: this module says *what* the server offers, ``memstore.mcp_server``
puts it on the wire.  Every tool is one library call whose answer is the same
JSON document ``memstore <command> --json`` prints (``memstore.reports``).
Arguments are checked against the tool's own input schema before the call, so
a wrong type or a missing argument is refused with a one-line message that
names the argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memstore import reports
from memstore.errors import MemstoreError, describe
from memstore.workspace import Workspace, status_report

Arguments = dict[str, Any]
Payload = dict[str, Any]


class ToolError(MemstoreError):
    """A call the server refuses or that failed: its message goes back to the model as one line."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool: what a model sees (name, description, schemas, hints) and the call it makes."""

    name: str
    title: str
    description: str
    properties: Mapping[str, Mapping[str, Any]]
    run: Callable[[Workspace, Arguments], Payload]
    required: tuple[str, ...] = ()
    output_schema: Mapping[str, Any] | None = None
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True
    hidden_unless_destructive_allowed: bool = field(default=False)

    @property
    def input_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {name: dict(prop) for name, prop in self.properties.items()},
            "additionalProperties": False,
        }
        if self.required:
            schema["required"] = list(self.required)
        return schema


# ----------------------------------------------------------------------------- argument checks

_JSON_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _conforms(value: object, wanted: str) -> bool:
    actual = _json_type(value)
    if wanted == "number":
        return actual in ("integer", "number") and (actual == "integer" or math.isfinite(float(value)))  # type: ignore[arg-type]
    if wanted == "integer" and actual == "number":
        return math.isfinite(float(value)) and float(value).is_integer()  # type: ignore[arg-type]
    return actual == wanted


def _check_value(name: str, value: object, schema: Mapping[str, Any]) -> object:
    """The value, normalised (an integral float becomes an int), or a ToolError naming ``name``."""
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError(f"argument {name!r} must be a finite number, not {value}")
    if not any(_conforms(value, wanted) for wanted in types):
        expected = " or ".join(_JSON_TYPE_NAMES[wanted] for wanted in types)
        raise ToolError(f"argument {name!r} must be {expected}, not {_JSON_TYPE_NAMES.get(_json_type(value), 'that')}")
    if isinstance(value, float) and "integer" in types and "number" not in types:
        value = int(value)
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(item) for item in schema["enum"])
        raise ToolError(f"argument {name!r} must be one of {allowed}")
    minimum = schema.get("minimum")
    if minimum is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and value < minimum:
        raise ToolError(f"argument {name!r} must be >= {minimum}, got {value}")
    items = schema.get("items")
    if items is not None and isinstance(value, list):
        value = [_check_value(f"{name}[{position}]", item, items) for position, item in enumerate(value)]
    return value


def check_arguments(spec: ToolSpec, arguments: object) -> Arguments:
    """Arguments checked against the tool's input schema, with defaults filled in."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolError(f"the arguments of {spec.name} must be a JSON object")
    unknown = sorted(set(arguments) - set(spec.properties))
    if unknown:
        accepted = ", ".join(spec.properties) or "none"
        raise ToolError(f"unknown argument {unknown[0]!r} for {spec.name} (accepted: {accepted})")
    missing = [name for name in spec.required if name not in arguments]
    if missing:
        raise ToolError(f"missing required argument {missing[0]!r} for {spec.name}")
    checked: Arguments = {}
    for name, schema in spec.properties.items():
        if name in arguments:
            checked[name] = _check_value(name, arguments[name], schema)
        elif "default" in schema:
            default = schema["default"]
            checked[name] = list(default) if isinstance(default, list) else default
    return checked


# ----------------------------------------------------------------------------- schemas

_STRING_LIST: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_OPTIONAL_STRING: dict[str, Any] = {"type": ["string", "null"]}


def _limit(default: int, what: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "default": default, "description": f"Return at most this many {what}."}


ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memory_id": {"type": "string"},
        "content": {"type": "string"},
        "tags": _STRING_LIST,
        "created_at": {"type": "string"},
        "branch_name": _OPTIONAL_STRING,
        "run_id": _OPTIONAL_STRING,
    },
    "required": ["memory_id", "content", "tags", "created_at", "branch_name", "run_id"],
}
_ENTRIES: dict[str, Any] = {"type": "array", "items": ENTRY_SCHEMA}

CARD_PROPERTIES: dict[str, Any] = {
    "id": {"type": "string"},
    "run_id": {"type": "string"},
    "timestamp": {"type": "number"},
    "error_type": {"type": "string"},
    "file_path": {"type": "string"},
    "line_number": {"type": ["integer", "null"]},
    "error_message": {"type": "string"},
    "task_description": {"type": "string"},
    "context_files": _STRING_LIST,
    "confidence": {"type": "string"},
    "expires_at": {"type": ["number", "null"]},
    "invalidated": {"type": "boolean"},
    "invalidation_reason": _OPTIONAL_STRING,
    "warning_behavior": {"type": "string"},
    "reviewer_type": {"type": "string"},
    "evidence_command": _OPTIONAL_STRING,
    "evidence_exit_code": {"type": ["integer", "null"]},
}
CARD_SCHEMA: dict[str, Any] = {"type": "object", "properties": CARD_PROPERTIES, "required": list(CARD_PROPERTIES)}
MATCHED_CARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {**CARD_PROPERTIES, "effective_behavior": {"type": "string", "enum": ["info", "warning", "block"]}},
    "required": [*CARD_PROPERTIES, "effective_behavior"],
}


def _object(properties: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(properties)}


_COUNT = {"type": "integer", "minimum": 0}
ENTRIES_RESULT = _object({"count": _COUNT, "entries": _ENTRIES})
SEARCH_RESULT = _object({"query": {"type": "string"}, "count": _COUNT, "entries": _ENTRIES})
RECALL_RESULT = _object(
    {"query": {"type": "string"}, "project": _ENTRIES, "personal": _ENTRIES, "auto_memory": _ENTRIES}
)
ENTRY_RESULT = _object({"entry": ENTRY_SCHEMA})
ADD_RESULT = _object({"entry": ENTRY_SCHEMA, "quarantined": {"type": "boolean"}})
MATCH_RESULT = _object({"count": _COUNT, "cards": {"type": "array", "items": MATCHED_CARD_SCHEMA}})
CARD_RESULT = _object({"card": CARD_SCHEMA})
PIN_SCHEMA = _object(
    {"file_path": {"type": "string"}, "pinned_at": {"type": "number"}, "last_modified": {"type": "number"}}
)
PINS_RESULT = _object({"count": _COUNT, "pinned": {"type": "array", "items": PIN_SCHEMA}})
PIN_RESULT = _object({"path": {"type": "string"}, "pinned": {"type": "boolean"}})
TEAM_PROMPT_RESULT = _object({"prompt": {"type": "string"}, "tokens": _COUNT})
TEAM_LINE_RESULT = _object({"line": {"type": "string"}})
STATUS_RESULT = _object(
    {
        "root": {"type": "string"},
        "counts": {"type": "object"},
        "health": {"type": "object"},
        "index": {"type": "object"},
    }
)
DELETE_RESULT = _object({"deleted": _COUNT, "branch": {"type": "string"}, "run_id": {"type": "null"}})
QUARANTINE_RESULT = _object({"quarantined": _COUNT, "branch": {"type": "string"}, "reason": {"type": "string"}})


# ----------------------------------------------------------------------------- the calls


def _search(ws: Workspace, args: Arguments) -> Payload:
    query = args["query"]
    return reports.entries_report(ws.reading_catalog.search(query, limit=args["limit"]), query=query)


def _recall(ws: Workspace, args: Arguments) -> Payload:
    query = args["query"]
    return reports.recall_report(query, ws.hierarchy.search_all(query, limit=args["limit"]))


def _add(ws: Workspace, args: Arguments) -> Payload:
    entry = ws.catalog.add(
        args["content"], tags=args["tags"], branch_name=args.get("branch_name"), run_id=args.get("run_id")
    )
    return reports.entry_report(entry, quarantined=False)


def _list(ws: Workspace, args: Arguments) -> Payload:
    return reports.entries_report(ws.reading_catalog.list(limit=args["limit"]))


def _show(ws: Workspace, args: Arguments) -> Payload:
    return reports.entry_report(ws.reading_catalog.show(args["memory_id"]))


def _match(ws: Workspace, args: Arguments) -> Payload:
    storage = ws.reading_failure_cards
    if storage is None:
        return reports.matching_cards_report([])
    cards = storage.find_matching(args["file_paths"], args["task_description"], args.get("error_type"), args["limit"])
    return reports.matching_cards_report(cards)


def _card_add(ws: Workspace, args: Arguments) -> Payload:
    from memstore.cards import FailureCard

    card = FailureCard.create(**args)
    ws.failure_cards.append(card)
    return reports.card_report(card)


def _pins(ws: Workspace, args: Arguments) -> Payload:
    return reports.pins_report(ws.pins.list_all())


def _pin_add(ws: Workspace, args: Arguments) -> Payload:
    path = args["path"]
    reason = ws.pins.refusal(path)
    if reason is None and not ws.pins.add(path):
        reason = ws.pins.refusal(path) or ("already pinned" if ws.pins.is_pinned(path) else "refused")
    if reason is not None:
        raise ToolError(f"not pinned: {path!r}: {reason}")
    return {"path": path, "pinned": True}


def _team_notes(ws: Workspace, args: Arguments) -> Payload:
    tokens = args["limit_tokens"]
    return {"prompt": ws.team.inject_prompt(limit_tokens=tokens), "tokens": tokens}


def _team_note_add(ws: Workspace, args: Arguments) -> Payload:
    return {"line": ws.team.add(args["text"])}


def _status(ws: Workspace, args: Arguments) -> Payload:
    return status_report(ws)


def _delete_by_branch(ws: Workspace, args: Arguments) -> Payload:
    branch = args["branch_name"]
    return {"deleted": ws.catalog.delete_by_branch(branch), "branch": branch, "run_id": None}


def _quarantine_by_branch(ws: Workspace, args: Arguments) -> Payload:
    branch, reason = args["branch_name"], args["reason"]
    return {"quarantined": ws.catalog.quarantine_by_branch(branch, reason), "branch": branch, "reason": reason}


# ----------------------------------------------------------------------------- the table

_QUERY = {
    "type": "string",
    "description": "Words that must all occur in an entry's content or tags (case-insensitive substrings).",
}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="memory_search",
        title="Search project memory",
        description=(
            "Search this repository's memory catalog for notes earlier sessions stored. Use before starting a "
            "task to find conventions, gotchas and decisions. An entry matches when every word of the query "
            "occurs in its content or tags; results come best match first, then newest. Exact and fast at any "
            "size. For personal memory and MEMORY.md as well, use memory_recall."
        ),
        properties={"query": _QUERY, "limit": _limit(10, "entries")},
        required=("query",),
        output_schema=SEARCH_RESULT,
        run=_search,
    ),
    ToolSpec(
        name="memory_recall",
        title="Recall from every memory tier",
        description=(
            "Search every memory tier at once: the project catalog, the user's personal memory "
            "(~/.config/teaagent) and the repository's .claude/MEMORY.md. Each tier is ranked on its own. "
            "Use it when a note could have been kept anywhere; memory_search covers the project only."
        ),
        properties={"query": _QUERY, "limit": _limit(10, "entries per tier")},
        required=("query",),
        output_schema=RECALL_RESULT,
        run=_recall,
    ),
    ToolSpec(
        name="memory_add",
        title="Remember a note",
        description=(
            "Store a note in this repository's memory so later sessions can find it: a convention, a command "
            "that works, a pitfall, a decision and its reason. Keep it self-contained, one fact per note. "
            "Tags (lowercased) make it easier to find. Returns the stored entry with its memory_id."
        ),
        properties={
            "content": {"type": "string", "description": "The note itself; must not be blank."},
            "tags": {**_STRING_LIST, "default": [], "description": 'Short topic labels, e.g. ["testing", "ci"].'},
            "branch_name": {**_OPTIONAL_STRING, "description": "Git branch the note belongs to, if any."},
            "run_id": {**_OPTIONAL_STRING, "description": "Id of the agent run that produced it, if any."},
        },
        required=("content",),
        output_schema=ADD_RESULT,
        run=_add,
        read_only=False,
        idempotent=False,
    ),
    ToolSpec(
        name="memory_list",
        title="List recent notes",
        description="The most recently stored notes of this repository's memory, newest first.",
        properties={"limit": _limit(10, "entries")},
        output_schema=ENTRIES_RESULT,
        run=_list,
    ),
    ToolSpec(
        name="memory_show",
        title="Show one note",
        description="One memory entry in full, by the memory_id a search, list or add returned.",
        properties={"memory_id": {"type": "string", "description": "The entry's memory_id."}},
        required=("memory_id",),
        output_schema=ENTRY_RESULT,
        run=_show,
    ),
    ToolSpec(
        name="failure_cards_match",
        title="Check known failures before a change",
        description=(
            "Before editing files, ask which remembered failures apply: cards recorded when an earlier attempt "
            "broke something. Give the files you will touch and what you are about to do. Returns matching "
            "active cards, best first, each with effective_behavior: 'block' means do not proceed this way, "
            "'warning' means take care, 'info' is context."
        ),
        properties={
            "file_paths": {**_STRING_LIST, "description": "Files the task will touch (relative paths)."},
            "task_description": {"type": "string", "description": "What you are about to do, in a sentence."},
            "error_type": {**_OPTIONAL_STRING, "description": "Prefer cards of this error type (e.g. TypeError)."},
            "limit": _limit(3, "cards"),
        },
        required=("file_paths", "task_description"),
        output_schema=MATCH_RESULT,
        run=_match,
    ),
    ToolSpec(
        name="failure_card_add",
        title="Record a failure",
        description=(
            "Record a failure so later sessions are warned before repeating it: where it happened, the error, "
            "and the task that caused it. Cards expire after ttl_seconds (30 days by default; 0 = never). "
            "'block' takes effect only for a human-reviewed, high-confidence card; otherwise it warns."
        ),
        properties={
            "run_id": {"type": "string", "description": "Id of the run that failed."},
            "error_type": {"type": "string", "description": "Kind of error, e.g. ImportError or test_failure."},
            "file_path": {"type": "string", "description": "File where the failure happened (relative path)."},
            "error_message": {"type": "string", "description": "The error message."},
            "task_description": {"type": "string", "description": "The task that led to the failure."},
            "context_files": {**_STRING_LIST, "default": [], "description": "Other files involved."},
            "line_number": {"type": ["integer", "null"], "default": None, "description": "Line of the failure."},
            "confidence": {"type": "string", "enum": ["low", "medium", "high"], "default": "low"},
            "ttl_seconds": {"type": "number", "default": 2592000, "description": "Lifetime; <= 0 never expires."},
            "warning_behavior": {"type": "string", "enum": ["info", "warning", "block"], "default": "warning"},
            "reviewer_type": {"type": "string", "enum": ["auto", "human"], "default": "auto"},
            "evidence_command": {**_OPTIONAL_STRING, "default": None, "description": "Command that shows it."},
            "evidence_exit_code": {"type": ["integer", "null"], "default": None},
        },
        required=("run_id", "error_type", "file_path", "error_message", "task_description"),
        output_schema=CARD_RESULT,
        run=_card_add,
        read_only=False,
        idempotent=False,
    ),
    ToolSpec(
        name="pins_list",
        title="List pinned files",
        description="Files pinned in this repository: files whose current contents belong in every session's context.",
        properties={},
        output_schema=PINS_RESULT,
        run=_pins,
    ),
    ToolSpec(
        name="pin_add",
        title="Pin a file",
        description=(
            "Pin a file so every session keeps its contents in context (an architecture note, a style guide). "
            "The path is relative to the repository root; secrets (.env, keys, credentials) and paths outside "
            "the repository are refused."
        ),
        properties={"path": {"type": "string", "description": "Path relative to the repository root."}},
        required=("path",),
        output_schema=PIN_RESULT,
        run=_pin_add,
        read_only=False,
        idempotent=False,
    ),
    ToolSpec(
        name="team_notes",
        title="Read team notes",
        description=(
            "The team's shared one-line notes (.teaagent/team-memory.md) as a prompt block: the newest notes "
            "that fit the token budget, oldest first."
        ),
        properties={
            "limit_tokens": {
                "type": "integer",
                "minimum": 0,
                "default": 2048,
                "description": "Budget in tokens (about 4 characters each) for the notes included.",
            }
        },
        output_schema=TEAM_PROMPT_RESULT,
        run=_team_notes,
    ),
    ToolSpec(
        name="team_note_add",
        title="Add a team note",
        description=(
            "Append a one-line note for the whole team (people and agents) to read, e.g. 'staging is frozen "
            "until Friday'. Line breaks are joined into one line. Returns the written line."
        ),
        properties={"text": {"type": "string", "description": "The note; must not be blank."}},
        required=("text",),
        output_schema=TEAM_LINE_RESULT,
        run=_team_note_add,
        read_only=False,
        idempotent=False,
    ),
    ToolSpec(
        name="memory_status",
        title="Memory status",
        description=(
            "Counts of entries, quarantined entries, failure cards, pins and team notes; the catalog's health "
            "(corrupt lines); and the search index state per source."
        ),
        properties={},
        output_schema=STATUS_RESULT,
        run=_status,
    ),
    ToolSpec(
        name="memory_delete_by_branch",
        title="Delete a branch's notes",
        description=(
            "Permanently delete every memory entry recorded for one git branch (for example after the branch "
            "was abandoned). Cannot be undone; prefer memory_quarantine_by_branch to keep a copy."
        ),
        properties={"branch_name": {"type": "string", "description": "The branch whose entries go."}},
        required=("branch_name",),
        output_schema=DELETE_RESULT,
        run=_delete_by_branch,
        read_only=False,
        destructive=True,
        hidden_unless_destructive_allowed=True,
    ),
    ToolSpec(
        name="memory_quarantine_by_branch",
        title="Quarantine a branch's notes",
        description=(
            "Move every memory entry of one git branch out of the catalog into quarantine "
            "(.teaagent/memory-quarantine.jsonl), with the reason recorded. Searches stop returning them."
        ),
        properties={
            "branch_name": {"type": "string", "description": "The branch whose entries move."},
            "reason": {"type": "string", "description": "Why, kept in each entry's provenance."},
        },
        required=("branch_name", "reason"),
        output_schema=QUARANTINE_RESULT,
        run=_quarantine_by_branch,
        read_only=False,
        destructive=True,
        hidden_unless_destructive_allowed=True,
    ),
)


def available_tools(*, allow_destructive: bool) -> dict[str, ToolSpec]:
    """The tools a server offers, by name; the destructive ones only when allowed."""
    return {spec.name: spec for spec in TOOLS if allow_destructive or not spec.hidden_unless_destructive_allowed}


def call_tool(tools: Mapping[str, ToolSpec], workspace: Workspace, name: str, arguments: object) -> Payload:
    """Check the arguments and make the call; every refusal or failure is a :class:`ToolError`."""
    spec = tools.get(name)
    if spec is None:
        raise ToolError(f"unknown tool {name!r}")
    checked = check_arguments(spec, arguments)
    if not workspace.root.is_dir():
        # A write would recreate the removed folder and put a store where no repository is any more.
        raise ToolError(f"the root {str(workspace.root)!r} no longer exists; restart the server on an existing root")
    try:
        return spec.run(workspace, checked)
    except ToolError:
        raise
    except (MemstoreError, OSError, ValueError, TypeError) as exc:
        raise ToolError(one_line(describe(exc))) from exc


def one_line(text: str, *, width: int = 500) -> str:
    """Whitespace collapsed to single spaces, cut to ``width`` characters."""
    flat = " ".join(text.split()) or "unknown error"
    return flat if len(flat) <= width else flat[: width - 1] + "…"

"""The ``memstore`` command: parse, call one library function, print.

Every command is a thin call into the library.  Human output is short lines and
aligned tables; ``--json`` prints one JSON document with stable keys (see
docs/cli.md).  Exit codes: 0 success, 1 not found / refused / failed, 2 usage
error, 130 interrupted.  Errors are one line on stderr, never a traceback.

Only the console script imports this module, so importing click at the top does
not make ``import memstore`` heavier.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import click

from memstore import __version__, reports
from memstore import cli_output as out
from memstore.errors import MemstoreError, describe
from memstore.files import MAX_LINE_BYTES
from memstore.logger import when_loaded
from memstore.workspace import open_catalog, workspace_root

if TYPE_CHECKING:
    from memstore.cards import FailureCard
    from memstore.catalog import MemoryCatalog
    from memstore.doctor import DoctorReport
    from memstore.failure_cards import FailureCardStorage
    from memstore.index.report import IndexState
    from memstore.index.trace import SearchPlan
    from memstore.index_url import IndexUrl
    from memstore.models import MemoryEntry
    from memstore.pinned import PinnedFileStorage
    from memstore.reports import WorkspaceStatus
    from memstore.team import TeamMemory
    from memstore.team_report import SourceFreshness

F = TypeVar("F", bound=Callable[..., Any])

PROG = "memstore"
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class Refused(Exception):
    """Something asked for was not found or was refused: exit 1 with this one-line message."""


class Env(NamedTuple):
    """The options every command shares, resolved (subcommand first, then its groups, then defaults)."""

    root: Path
    fmt: str
    """table, json, jsonl or csv; ``--json`` is ``json``."""

    @property
    def as_json(self) -> bool:
        return self.fmt == "json"


# ----------------------------------------------------------------------------- output helpers


def _emit_json(payload: object) -> None:
    # ASCII only: the output stays valid JSON whatever the terminal encoding, lone
    # surrogates included.  The documents themselves come from memstore.reports,
    # which the MCP server returns too.
    click.echo(reports.json_text(payload))


def _emit_listing(
    env: Env,
    payload: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    human: Callable[[], str],
    columns: Sequence[str] | None = None,
) -> None:
    """One listing in the chosen format: the JSON document, one JSON line per record, CSV, or a table."""
    if env.fmt == "json":
        _emit_json(payload)
    elif env.fmt == "jsonl":
        text = out.jsonl_text(records)
        if text:
            click.echo(text)
    elif env.fmt == "csv":
        click.echo(out.csv_text(records, columns))
    else:
        click.echo(human())


def _iso(value: object) -> str:
    """A timestamp as ISO 8601 UTC to the second (``2026-01-02T03:04:05Z``); text kept when unparsable."""
    from datetime import UTC, datetime

    if value is None:
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        except (OverflowError, OSError, ValueError):
            return str(value)
    text = str(value)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return out.one_line(text, 25)
    if parsed.tzinfo is None:
        return parsed.strftime("%Y-%m-%dT%H:%M:%S")
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fields(pairs: Iterable[tuple[str, object]]) -> str:
    """``key: value`` lines with the values aligned."""
    items = [(key, _scalar(value)) for key, value in pairs]
    width = max((len(key) for key, _ in items), default=0)
    return "\n".join(f"{key + ':':<{width + 1}} {value}".rstrip() for key, value in items)


def _scalar(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(_scalar(item) for item in value) or "-"
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _flatten(mapping: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    """Nested report dicts as dotted keys, for ``key: value`` output."""
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value


ENTRY_COLUMNS = ("memory_id", "created_at", "tags", "branch_name", "run_id", "content")


def _entries_table(entries: Sequence[MemoryEntry], short: Mapping[str, str], *, empty: str = "no entries") -> str:
    if not entries:
        return empty
    rows = [
        (
            out.one_line(short.get(entry.memory_id, entry.memory_id)),
            _iso(entry.created_at),
            out.one_line(",".join(entry.tags), 24),
            out.one_line(entry.content),
        )
        for entry in entries
    ]
    return out.table(("ID", "CREATED", "TAGS", "CONTENT"), rows, width=out.terminal_width())


def _emit_entries(
    env: Env, catalog: MemoryCatalog, entries: Sequence[MemoryEntry], payload: Mapping[str, Any], *, empty: str
) -> None:
    def human() -> str:
        short = catalog.short_ids(entry.memory_id for entry in entries) if entries else {}
        return _entries_table(entries, short, empty=empty)

    _emit_listing(env, payload, [entry.to_dict() for entry in entries], human, ENTRY_COLUMNS)


def _card_status(card: FailureCard) -> str:
    return "active" if card.is_active() else ("invalidated" if card.invalidated else "expired")


def _cards_table(cards: Sequence[FailureCard], short: Mapping[str, str], *, empty: str = "no failure cards") -> str:
    if not cards:
        return empty
    rows = []
    for card in cards:
        where = card.file_path if card.line_number is None else f"{card.file_path}:{card.line_number}"
        rows.append(
            (
                out.one_line(short.get(card.id, card.id)),
                _card_status(card),
                card.confidence,
                out.one_line(card.error_type, 20),
                out.one_line(where, 40),
                out.one_line(card.error_message),
            )
        )
    return out.table(("ID", "STATUS", "CONFIDENCE", "ERROR", "FILE", "MESSAGE"), rows, width=out.terminal_width())


def _emit_cards(env: Env, cards: Sequence[FailureCard], payload: Mapping[str, Any], *, empty: str) -> None:
    """Cards in the chosen format; ``payload`` is the --json document (memstore.reports)."""

    def human() -> str:
        from memstore.id_prefix import short_ids_among

        storage = _reading_failure_cards(env)
        everyone = [] if storage is None else [card.id for card in storage.list_all()]
        return _cards_table(cards, short_ids_among([card.id for card in cards], everyone), empty=empty)

    records = [{**card.to_dict(), "status": _card_status(card)} for card in cards]
    _emit_listing(env, payload, records, human)


def _show_entry(entry: MemoryEntry, extra: Iterable[tuple[str, object]] = ()) -> str:
    head = _fields(
        [
            ("memory_id", entry.memory_id),
            ("created_at", entry.created_at),  # as stored: already ISO 8601, to the microsecond
            ("tags", list(entry.tags)),
            ("branch_name", entry.branch_name),
            ("run_id", entry.run_id),
            *extra,
        ]
    )
    return f"{head}\n\n{entry.content}"


def _plan_text(plan: SearchPlan) -> str:
    answered = {"index": f"by the index ({plan.index_state})", "scan": "by a scan", "none": "without searching"}
    head = _fields(
        [
            ("query", out.one_line(plan.query)),
            ("tokens", [out.one_line(token) for token in plan.tokens]),
            ("answered", answered.get(plan.path, plan.path)),
            ("why", plan.reason or None),
            ("results", f"{len(plan.memory_ids)} (limit {plan.limit})"),
            ("time", f"{plan.seconds * 1000:.3f} ms"),
        ]
    )
    if not plan.steps:
        return head
    rows = [
        (
            step.step,
            out.one_line(step.detail),
            "-" if step.candidates is None else str(step.candidates),
            f"{step.seconds * 1000:.3f}",
            step.outcome,
        )
        for step in plan.steps
    ]
    return f"{head}\n\n{out.table(('STEP', 'DETAIL', 'ROWS', 'MS', 'OUTCOME'), rows)}"


def _bytes(value: object) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        return _scalar(value)
    if value < 1024:
        return f"{value} B"
    size = value / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


# ----------------------------------------------------------------------------- shared options


def _resolve_env(ctx: click.Context, root: Path | None, as_json: bool, fmt: str | None) -> Env:
    """The command's own options first, then each enclosing group's, then the defaults.

    The one place the workspace root is decided (see memstore.workspace.workspace_root).
    """
    level: click.Context | None = ctx.parent
    while level is not None:
        if root is None:
            root = level.params.get("root")
        as_json = as_json or bool(level.params.get("as_json"))
        level = level.parent
    if fmt is None:
        fmt = "json" if as_json else "table"
    elif as_json and fmt != "json":
        raise click.UsageError(f"--json and --format {fmt} disagree")
    return Env(root=workspace_root(root), fmt=fmt)


_ROOT_HELP = (
    "Workspace root holding .teaagent/ (default: $MEMSTORE_ROOT, else the nearest folder upwards holding"
    " .teaagent/, else the top of the git work tree, else the current directory)."
)
_JSON_HELP = "Print one JSON document on stdout instead of human-readable text (same as --format json)."
_FORMAT_HELP = "Output format: an aligned table (default), one JSON document, JSON lines, or CSV."


_ROOT_TYPE = click.Path(file_okay=False, path_type=Path)
"""One instance for every command's --root: each click.Path looks its name up through gettext,
which stats the locale folders (~40 us a command, on every run of the CLI)."""


def _root_option() -> Callable[[F], F]:
    return click.option(
        "--root",
        type=_ROOT_TYPE,
        default=None,
        metavar="PATH",
        help=_ROOT_HELP,
    )


def _json_option() -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, default=False, help=_JSON_HELP)


def _format_option() -> Callable[[F], F]:
    return click.option("--format", "fmt", type=click.Choice(out.FORMATS), default=None, help=_FORMAT_HELP)


def _env_command(*, listing: bool) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def decorate(func: Callable[..., None]) -> Callable[..., None]:
        def wrapper(
            ctx: click.Context, /, root: Path | None, as_json: bool, fmt: str | None = None, **kwargs: Any
        ) -> None:
            func(_resolve_env(ctx, root, as_json, fmt), **kwargs)

        wrapper.__name__ = func.__name__
        wrapper.__doc__ = func.__doc__
        decorated = click.pass_context(wrapper)
        if listing:
            decorated = _format_option()(decorated)
        return _root_option()(_json_option()(decorated))

    return decorate


with_env = _env_command(listing=False)
"""Add ``--root`` and ``--json`` to a command and hand it the resolved :class:`Env`."""
with_listing_env = _env_command(listing=True)
"""Like :data:`with_env`, plus ``--format`` (a command that lists records)."""


def _group_options(func: F) -> F:
    """``--root`` and ``--json`` on a group, so they work at every level of the command."""
    return _root_option()(_json_option()(func))


def _limit_option(default: int, what: str) -> Callable[[F], F]:
    return click.option(
        "--limit",
        type=click.IntRange(min=0),
        default=default,
        show_default=True,
        help=f"Return at most this many {what}.",
    )


def _has_store(env: Env) -> bool:
    from memstore.layout import has_store

    return has_store(env.root)


def _filter_options(func: F) -> F:
    run = click.option("--run", "--run-id", "run_id", default=None, metavar="RUN", help="Only entries of this run id.")
    func = run(func)
    func = click.option("--branch", default=None, help="Only entries of this git branch.")(func)
    return click.option(
        "--tag", "tags", multiple=True, metavar="TAG", help="Only entries with this tag (repeat: all must be present)."
    )(func)


def _catalog(env: Env, *, for_reading: bool = False) -> MemoryCatalog:
    """The project catalog; a read falls back to readonly when the store exists but cannot be written."""
    if for_reading and not _has_store(env):
        # A read on a root without a store answers empty and creates nothing.
        from memstore.catalog import MemoryCatalog

        return MemoryCatalog(env.root, readonly=True)
    return open_catalog(env.root, for_reading=for_reading)


def _outcome(env: Env, payload: Mapping[str, Any], done: bool, done_message: str, refused_message: str) -> None:
    """Report a yes/no action: JSON or a line when done; exit 1 (Refused) when not."""
    if env.as_json:
        _emit_json(payload)
    elif done:
        click.echo(done_message)
    if not done:
        raise Refused(refused_message)


def _failure_cards(env: Env) -> FailureCardStorage:
    """The failure cards, for a write (opening the storage creates ``.teaagent/memory/``)."""
    from memstore.failure_cards import FailureCardStorage

    return FailureCardStorage(env.root)


def _reading_failure_cards(env: Env) -> FailureCardStorage | None:
    """The failure cards for a read; None where no card folder exists (the answer is empty, nothing is created)."""
    from memstore.layout import memory_dir

    if not memory_dir(env.root).is_dir():
        return None
    return _failure_cards(env)


def _read_input(content: str | None, path: Path | None, what: str) -> str:
    """CONTENT as given, all of stdin for ``-``, or the file of ``--file`` (UTF-8)."""
    if (content is None) == (path is None):
        raise click.UsageError(f"give {what} as an argument, '-' for stdin, or --file PATH (exactly one)")
    if path is not None:
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_LINE_BYTES + 1)
        except OSError as exc:
            raise click.BadParameter(describe(exc), param_hint="--file") from None
        source = str(path)
    elif content == "-":
        data = sys.stdin.buffer.read(MAX_LINE_BYTES + 1)
        source = "stdin"
    else:
        return str(content)
    if len(data) > MAX_LINE_BYTES:
        # Bounded read: an endless source (/dev/zero, a pipe) must not exhaust memory.
        raise click.BadParameter(f"{source} holds more than {MAX_LINE_BYTES} bytes, more than a line may hold",
                                 param_hint=what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise click.BadParameter(f"{source} is not UTF-8 text", param_hint=what) from None


def _confirmed(question: str, *, yes: bool) -> bool:
    """Ask on a terminal unless --yes; without a terminal on stdin, proceed as scripts always did."""
    if yes or not _stdin_is_terminal():
        return True
    return click.confirm(question, default=False, err=True)


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


ALL_ROWS = 2**62


# ----------------------------------------------------------------------------- the command tree


@click.group(
    name=PROG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    no_args_is_help=True,
)
@_group_options
@click.version_option(__version__, "--version", prog_name=PROG, help="Show the version and exit.")
def cli(root: Path | None, as_json: bool) -> None:
    """Inspect and maintain an agent's memory.

    The catalog, failure cards, pinned files, team notes and the search index.

    --root and --json work at every level: before the subcommand, between a group and
    its subcommand, or after it.
    """


@cli.command("add")
@click.argument("content", required=False)
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PATH",
              help="Read the content from this file (UTF-8) instead of the argument.")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="Tag the entry (repeat for several).")
@click.option("--branch", default=None, help="Scope the entry to this git branch.")
@click.option("--run-id", "--run", "run_id", default=None, help="Scope the entry to this run id.")
@click.option("--quarantine", is_flag=True, help="Append to the quarantine file (needs --provenance).")
@click.option("--provenance", default=None, metavar="JSON", help="Provenance of the quarantined entry (a JSON object).")
@with_env
def add_command(
    env: Env,
    content: str | None,
    path: Path | None,
    tags: tuple[str, ...],
    branch: str | None,
    run_id: str | None,
    quarantine: bool,
    provenance: str | None,
) -> None:
    """Add CONTENT as a new memory entry and print its id.

    CONTENT '-' reads the content from stdin; --file PATH reads it from a file.
    """
    if quarantine != (provenance is not None):
        raise click.UsageError("--quarantine and --provenance go together")
    text = _read_input(content, path, "CONTENT")
    catalog = _catalog(env)
    if quarantine:
        entry = catalog.add_quarantined(
            text,
            tags=tags,
            provenance=_json_object(provenance, "--provenance"),
            branch_name=branch,
            run_id=run_id,
        )
    else:
        entry = catalog.add(text, tags=tags, branch_name=branch, run_id=run_id)
    if env.as_json:
        _emit_json(reports.entry_report(entry, quarantined=quarantine))
    else:
        click.echo(f"{'quarantined' if quarantine else 'added'} {entry.memory_id}")


def _json_object(text: str | None, option: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "")
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON ({exc})", param_hint=option) from None
    except RecursionError:
        raise click.BadParameter("not valid JSON (nested too deeply)", param_hint=option) from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint=option)
    return value


@cli.command("list")
@_limit_option(20, "entries")
@_filter_options
@with_listing_env
def list_command(env: Env, limit: int, tags: tuple[str, ...], branch: str | None, run_id: str | None) -> None:
    """List the newest memory entries, newest first.

    --tag (repeatable: all must be present), --branch and --run keep only matching entries.
    """
    catalog = _catalog(env, for_reading=True)
    _catch_up_with_feedback(catalog)
    entries = catalog.list(limit=limit, tags=tags, branch_name=branch, run_id=run_id)
    payload = reports.entries_report(entries)
    _emit_entries(env, catalog, entries, payload, empty="no entries")


@cli.command("show")
@click.argument("memory_id", metavar="ID")
@with_env
def show_command(env: Env, memory_id: str) -> None:
    """Show one memory entry.

    ID may be a unique prefix of at least 4 characters. Exit 1 when no entry matches or the
    prefix is ambiguous (the candidates are listed).
    """
    catalog = _catalog(env, for_reading=True)
    entry = catalog.show(catalog.resolve_id(memory_id))
    if env.as_json:
        _emit_json(reports.entry_report(entry))
    else:
        click.echo(_show_entry(entry))


_INDEX_URL_HELP = (
    "A team index on PostgreSQL (postgresql://role@host/db; default: $MEMSTORE_INDEX_URL;"
    " an empty value: the local SQLite index)."
)


def _index_url_option(func: F) -> F:
    return click.option("--index-url", default=None, metavar="URL", help=_INDEX_URL_HELP)(func)


def _team_url(explicit: str | None) -> IndexUrl | None:
    from memstore.index_url import resolve_index_url

    return resolve_index_url(explicit)


def _warn(message: str) -> None:
    click.echo(f"{PROG}: warning: {' '.join(message.split())}", err=True)


def _freshness_line(source: SourceFreshness) -> str:
    when = _iso(source.caught_up_at) if source.caught_up_at else "never"
    entries = "" if source.entries is None else f"{_plural(source.entries, 'entry', 'entries')}, "
    return f"{out.one_line(source.name)}: {entries}{_bytes(source.bytes_indexed)} indexed, caught up {when}"


TEAM_ENTRY_COLUMNS = ("source", "score", *ENTRY_COLUMNS)


def _team_search(env: Env, url: IndexUrl, query: str, limit: int, sources: Sequence[str]) -> None:
    from memstore.source_name import default_source_name
    from memstore.team_index import TeamIndex

    # This workspace's own source can be answered from its files when the database is down.
    own = default_source_name(env.root)
    local = {own: env.root}
    names = [own if name == "." else name for name in sources] or None
    with TeamIndex(url) as team:
        result = team.search(query, limit=limit, sources=names, local=local)
    for warning in result.warnings:
        _warn(warning)

    def human() -> str:
        rows = [
            (
                out.one_line(hit.source, 32),
                out.one_line(hit.entry.memory_id, 12),
                _iso(hit.entry.created_at),
                out.one_line(",".join(hit.entry.tags), 24),
                out.one_line(hit.entry.content),
            )
            for hit in result.hits
        ]
        table = out.table(("SOURCE", "ID", "CREATED", "TAGS", "CONTENT"), rows, width=out.terminal_width())
        lines = [table if rows else "no matches", "", "sources:"]
        lines += [f"  {_freshness_line(source)}" for source in result.sources]
        return "\n".join(lines)

    records = [hit.to_dict() for hit in result.hits]
    _emit_listing(env, result.to_dict(), records, human, TEAM_ENTRY_COLUMNS)


@cli.command("search")
@click.argument("query")
@_limit_option(10, "entries")
@_filter_options
@click.option(
    "--explain",
    is_flag=True,
    default=False,
    help="Show how the search was answered (the index's steps with candidate counts and times) instead of the results.",
)
@_index_url_option
@click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="NAME",
    help="With an index URL: search only this source ('.' is this workspace's; repeat for several;"
    " default: every source).",
)
@with_listing_env
def search_command(
    env: Env,
    query: str,
    limit: int,
    tags: tuple[str, ...],
    branch: str | None,
    run_id: str | None,
    explain: bool,
    index_url: str | None,
    sources: tuple[str, ...],
) -> None:
    """Search entries, best match first.

    An entry matches when every word of QUERY is in its content or a tag. --tag (repeatable:
    all must be present), --branch and --run restrict the search to matching entries.

    With --index-url (or $MEMSTORE_INDEX_URL) the team index on PostgreSQL is searched:
    every source, or those named by --source; each hit names its source, and the answer
    says how current each source is.
    """
    url = _team_url(index_url)
    if url is not None:
        if explain or tags or branch is not None or run_id is not None:
            raise click.UsageError("a team index search takes no --explain, --tag, --branch or --run")
        _team_search(env, url, query, limit, sources)
        return
    if sources:
        raise click.UsageError("--source needs --index-url or $MEMSTORE_INDEX_URL (a team index)")
    if explain:
        if tags or branch is not None or run_id is not None:
            raise click.UsageError("--explain shows unfiltered searches only: drop --tag, --branch and --run")
        plan = _catalog(env, for_reading=True).explain(query, limit=limit)
        if env.as_json:
            _emit_json(plan.to_dict())
        else:
            click.echo(_plan_text(plan))
        return
    catalog = _catalog(env, for_reading=True)
    _catch_up_with_feedback(catalog)
    entries = catalog.search(query, limit=limit, tags=tags, branch_name=branch, run_id=run_id)
    payload = reports.entries_report(entries, query=query)
    _emit_entries(env, catalog, entries, payload, empty="no matches")


_DRY_RUN_HELP = "Show what would be removed and change nothing."
_YES_HELP = "Do not ask for confirmation (a terminal on stdin is asked by default)."


@cli.command("delete")
@click.option("--branch", default=None, help="Delete every entry of this branch.")
@click.option("--run-id", "--run", "run_id", default=None, help="Delete every entry of this run id.")
@click.option("--dry-run", is_flag=True, help=_DRY_RUN_HELP)
@click.option("--yes", "-y", is_flag=True, help=_YES_HELP)
@with_env
def delete_command(env: Env, branch: str | None, run_id: str | None, dry_run: bool, yes: bool) -> None:
    """Delete the entries of one branch or one run.

    Give exactly one of --branch and --run-id. On a terminal it asks first; --yes skips the
    question; when stdin is not a terminal it deletes without asking.
    """
    if (branch is None) == (run_id is None):
        raise click.UsageError("give exactly one of --branch or --run-id")
    catalog = _catalog(env, for_reading=dry_run)
    what = f"branch {branch!r}" if branch is not None else f"run {run_id!r}"
    if dry_run or (not yes and _stdin_is_terminal()):
        matching = catalog.list(limit=ALL_ROWS, branch_name=branch, run_id=run_id)
        if dry_run:
            _preview(env, catalog, matching, {"dry_run": True, "branch": branch, "run_id": run_id}, "delete")
            return
        if not _confirmed(f"delete {_plural(len(matching), 'entry', 'entries')} of {what}?", yes=yes):
            raise Refused("nothing deleted")
    if branch is not None:
        deleted = catalog.delete_by_branch(branch)
    elif run_id is not None:
        deleted = catalog.delete_by_run_id(run_id)
    else:  # unreachable: exactly one was given
        raise click.UsageError("give exactly one of --branch or --run-id")
    if env.as_json:
        _emit_json({"deleted": deleted, "branch": branch, "run_id": run_id})
    else:
        click.echo(f"deleted {_plural(deleted, 'entry', 'entries')}")


def _preview(
    env: Env, catalog: MemoryCatalog, entries: Sequence[MemoryEntry], payload: Mapping[str, Any], verb: str
) -> None:
    if env.as_json:
        _emit_json({**payload, f"would_{verb}": len(entries), "entries": [entry.to_dict() for entry in entries]})
        return
    if entries:
        short = catalog.short_ids(entry.memory_id for entry in entries)
        click.echo(_entries_table(entries, short))
    click.echo(f"would {verb} {_plural(len(entries), 'entry', 'entries')} (dry run: nothing changed)")


@cli.command("quarantine")
@click.option("--branch", required=True, help="Move every entry of this branch to quarantine.")
@click.option("--reason", required=True, help="Why, recorded in each entry's provenance.")
@click.option("--dry-run", is_flag=True, help=_DRY_RUN_HELP)
@click.option("--yes", "-y", is_flag=True, help=_YES_HELP)
@with_env
def quarantine_command(env: Env, branch: str, reason: str, dry_run: bool, yes: bool) -> None:
    """Move a branch's entries into quarantine.

    They leave memory.jsonl for memory-quarantine.jsonl, with the reason in their provenance.
    Asks first on a terminal, like delete.
    """
    catalog = _catalog(env, for_reading=dry_run)
    if dry_run or (not yes and _stdin_is_terminal()):
        matching = catalog.list(limit=ALL_ROWS, branch_name=branch)
        if dry_run:
            _preview(env, catalog, matching, {"dry_run": True, "branch": branch, "reason": reason}, "quarantine")
            return
        if not _confirmed(f"quarantine {_plural(len(matching), 'entry', 'entries')} of branch {branch!r}?", yes=yes):
            raise Refused("nothing quarantined")
    moved = catalog.quarantine_by_branch(branch, reason)
    if env.as_json:
        _emit_json({"quarantined": moved, "branch": branch, "reason": reason})
    else:
        click.echo(f"quarantined {_plural(moved, 'entry', 'entries')}")


@cli.group("quarantined", invoke_without_command=True)
@_limit_option(20, "entries")
@_format_option()
@_group_options
@click.pass_context
def quarantined_group(ctx: click.Context, limit: int, fmt: str | None, root: Path | None, as_json: bool) -> None:
    """Quarantined entries: list the newest (the default), or show one."""
    if ctx.invoked_subcommand is None:
        _list_quarantined(_resolve_env(ctx, root, as_json, fmt), limit)


def _list_quarantined(env: Env, limit: int) -> None:
    catalog = _catalog(env, for_reading=True)
    records = catalog.quarantined_records(limit=limit)
    entries = [record.entry for record in records]

    def human() -> str:
        from memstore.id_prefix import short_ids_among

        everyone = [entry.memory_id for entry in catalog.list_quarantined(limit=ALL_ROWS)]
        short = short_ids_among([entry.memory_id for entry in entries], everyone)
        return _entries_table(entries, short, empty="no quarantined entries")

    dicts = [record.to_dict() for record in records]
    _emit_listing(env, {"count": len(records), "entries": dicts}, dicts, human, (*ENTRY_COLUMNS, "provenance"))


@quarantined_group.command("list")
@_limit_option(20, "entries")
@with_listing_env
def quarantined_list_command(env: Env, limit: int) -> None:
    """List the newest quarantined entries, newest first, with their provenance."""
    _list_quarantined(env, limit)


@quarantined_group.command("show")
@click.argument("memory_id", metavar="ID")
@with_env
def quarantined_show_command(env: Env, memory_id: str) -> None:
    """Show one quarantined entry with its provenance (reason, original branch, when).

    ID may be a unique prefix of at least 4 characters.
    """
    record = _catalog(env, for_reading=True).show_quarantined(memory_id)
    if env.as_json:
        _emit_json({"entry": record.to_dict()})
    else:
        provenance = [(f"provenance.{key}", value) for key, value in sorted(record.provenance.items())]
        fixed = [(key, _iso(value) if key.endswith("_at") else value) for key, value in provenance]
        click.echo(_show_entry(record.entry, fixed))


@cli.command("health")
@with_env
def health_command(env: Env) -> None:
    """Report entry counts, corrupt lines and index state."""
    report = _catalog(env, for_reading=True).health().to_dict()
    if env.as_json:
        _emit_json(report)
    else:
        click.echo(_fields(_flatten(report)))


@cli.command("maintain")
@click.option(
    "--apply", "apply_changes", is_flag=True, help="Do what the report lists (a backup is kept; see doctor --fix)."
)
@with_env
def maintain_command(env: Env, apply_changes: bool) -> None:
    """Report what a maintenance pass would clean up in memory.jsonl.

    Without --apply a dry run: nothing is changed.
    """
    if apply_changes:
        from memstore.doctor import repair

        _print_doctor(env, repair(env.root, catalog_only=True), fixed=True)
        return
    report = _catalog(env, for_reading=True).maintenance_preview().to_dict()
    if env.as_json:
        _emit_json(report)
    else:
        click.echo(_fields(_flatten(report)))


# ----------------------------------------------------------------------------- repository


@cli.command("init")
@click.option("--git", "register_git", is_flag=True, help="Also register the merge-json driver in the git config.")
@with_env
def init_command(env: Env, register_git: bool) -> None:
    """Create the store, or add its .gitattributes and .gitignore to an existing one.

    Existing files keep their lines; only missing ones are added.
    """
    from memstore.layout import ensure_store, store_dir, write_git_files

    directory = store_dir(env.root)
    ensure_store(directory)
    written = [str(path) for path in write_git_files(directory, overwrite=True)]
    payload: dict[str, Any] = {"store": str(directory), "written": written, "merge_driver": None}
    if register_git:
        from memstore.merge_json import register_driver

        payload["merge_driver"] = register_driver(env.root)
    if env.as_json:
        _emit_json(payload)
        return
    click.echo(f"store: {directory}")
    for path in written:
        click.echo(f"wrote {path}")
    if payload["merge_driver"]:
        click.echo(f"registered merge driver: {payload['merge_driver']}")


@cli.command("doctor")
@click.option("--fix", is_flag=True, help="Repair what is found (under the lock, keeping a backup of each file).")
@with_env
def doctor_command(env: Env, fix: bool) -> None:
    """Find conflict markers, duplicate ids, corrupt lines and other damage.

    Each finding names its file and line. Exit 1 while an error is left.
    """
    from memstore.doctor import diagnose, repair

    report = repair(env.root) if fix else diagnose(env.root)
    _print_doctor(env, report, fixed=fix)


def _print_doctor(env: Env, report: DoctorReport, *, fixed: bool) -> None:
    if env.as_json:
        _emit_json(report.to_dict())
    else:
        for change in report.changes:
            click.echo(f"fixed: {change}")
        for finding in report.findings:
            where = finding.file if finding.line is None else f"{finding.file}:{finding.line}"
            note = "" if finding.fixable or not fixed else " (not fixed)"
            click.echo(f"{where}: {finding.severity}: {finding.kind}: {out.one_line(finding.detail)}{note}")
        click.echo("healthy" if report.healthy else "problems found" + ("" if fixed else "; run with --fix to repair"))
    if not report.healthy:
        raise Refused("the store has problems" + (" that could not be fixed" if fixed else ""))


@cli.command("merge-json")
@click.argument("base", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("ours", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("theirs", type=click.Path(dir_okay=False, path_type=Path))
@with_env
def merge_json_command(env: Env, base: Path, ours: Path, theirs: Path) -> None:
    """git merge driver for failures.json and pinned.json (%O %A %B).

    Union by id, the newer record wins; the result replaces OURS. Exit 1 leaves the conflict to git.
    """
    from memstore.merge_json import merge_files

    count = merge_files(base, ours, theirs)
    if env.as_json:
        _emit_json({"merged": str(ours), "records": count})


# ----------------------------------------------------------------------------- failures


@cli.group("failures")
@_group_options
def failures_group(root: Path | None, as_json: bool) -> None:
    """Failure cards: remembered errors that warn agents."""


@failures_group.command("list")
@click.option("--active", is_flag=True, help="Only cards that are neither invalidated nor expired.")
@with_listing_env
def failures_list_command(env: Env, active: bool) -> None:
    """List failure cards in file order."""
    storage = _reading_failure_cards(env)
    cards = [] if storage is None else storage.list_active() if active else storage.list_all()
    _emit_cards(env, cards, reports.cards_report(cards), empty="no failure cards")


def _card_fields(card: FailureCard) -> str:
    times = {"timestamp", "expires_at"}
    pairs = [(key, _iso(value) if key in times and value is not None else value)
             for key, value in card.to_dict().items()]
    return _fields([*pairs, ("active", card.is_active())])


@failures_group.command("show")
@click.argument("card_id", metavar="ID")
@with_env
def failures_show_command(env: Env, card_id: str) -> None:
    """Show one failure card.

    ID may be a unique prefix of at least 4 characters. Exit 1 when no card matches.
    """
    storage = _reading_failure_cards(env)
    card = None if storage is None else storage.get_by_id(storage.resolve_id(card_id))
    if card is None:
        raise Refused(f"failure card not found: {card_id.strip()}")
    if env.as_json:
        _emit_json(reports.card_report(card))
    else:
        click.echo(_card_fields(card))


@failures_group.command("add")
@click.option("--error-type", required=True, help="The kind of error, e.g. ImportError.")
@click.option("--file", "file_path", required=True, metavar="PATH", help="The file the error is about.")
@click.option("--line", "line_number", type=click.IntRange(min=0), default=None, help="The line in that file.")
@click.option("--message", required=True, help="The error message.")
@click.option("--task", default="", help="The task that failed.")
@click.option("--run-id", "--run", "run_id", default="", help="The run that failed.")
@click.option("--context-file", "context_files", multiple=True, metavar="PATH", help="Another file involved (repeat).")
@click.option("--confidence", type=click.Choice(["low", "medium", "high"]), default="medium", show_default=True,
              help="How sure the failure will recur.")
@click.option("--behavior", type=click.Choice(["info", "warning", "block"]), default="warning", show_default=True,
              help="How loudly to warn (block needs --reviewer human and --confidence high to take effect).")
@click.option("--reviewer", type=click.Choice(["agent", "human"]), default="agent", show_default=True,
              help="Who reviewed the card.")
@click.option("--ttl-days", type=float, default=30.0, show_default=True, help="Expire after this many days (0: never).")
@with_env
def failures_add_command(
    env: Env,
    error_type: str,
    file_path: str,
    line_number: int | None,
    message: str,
    task: str,
    run_id: str,
    context_files: tuple[str, ...],
    confidence: str,
    behavior: str,
    reviewer: str,
    ttl_days: float,
) -> None:
    """Record a failure card and print its id."""
    from memstore.cards import FailureCard

    card = FailureCard.create(
        run_id,
        error_type,
        file_path,
        message,
        task,
        list(context_files),
        line_number,
        confidence=confidence,
        ttl_seconds=ttl_days * 86400,
        warning_behavior=behavior,
        reviewer_type=reviewer,
    )
    _failure_cards(env).append(card)
    if env.as_json:
        _emit_json({"card": card.to_dict()})
    else:
        click.echo(f"added {card.id}")


@failures_group.command("match")
@click.option("--file", "files", multiple=True, metavar="PATH", help="A file the task touches (repeatable).")
@click.option("--task", required=True, help="The task description to match against.")
@click.option("--error-type", default=None, help="Also prefer cards with this error type.")
@_limit_option(3, "cards")
@with_listing_env
def failures_match_command(env: Env, files: tuple[str, ...], task: str, error_type: str | None, limit: int) -> None:
    """Find the active cards most relevant to a task.

    Scored by file path, error type and task keywords; best first.
    """
    storage = _reading_failure_cards(env)
    cards = [] if storage is None else storage.find_matching(list(files), task, error_type, limit)
    _emit_cards(env, cards, reports.matching_cards_report(cards), empty="no matching failure cards")


@failures_group.command("invalidate")
@click.argument("card_id", metavar="ID")
@click.option("--reason", required=True, help="Why the card no longer applies.")
@with_env
def failures_invalidate_command(env: Env, card_id: str, reason: str) -> None:
    """Invalidate a failure card for good.

    ID may be a unique prefix of at least 4 characters. Exit 1 when no card matches.
    """
    from memstore.errors import EntryNotFoundError

    storage = _failure_cards(env)
    try:
        full_id = storage.resolve_id(card_id)
    except EntryNotFoundError:
        full_id = card_id.strip()  # reported below as not invalidated, as before prefixes existed
    found = storage.invalidate(full_id, reason=reason)
    _outcome(
        env,
        {"id": full_id, "invalidated": found},
        found,
        f"invalidated {full_id}",
        f"failure card not found: {card_id.strip()}",
    )


@failures_group.command("clear")
@click.argument("card_id", metavar="ID", required=False)
@click.option("--all", "every", is_flag=True, help="Remove every card instead of one.")
@click.option("--yes", "-y", is_flag=True, help=_YES_HELP)
@with_env
def failures_clear_command(env: Env, card_id: str | None, every: bool, yes: bool) -> None:
    """Remove one failure card (ID, or a unique prefix), or every card with --all.

    --all asks first on a terminal, like delete.
    """
    if (card_id is None) == (not every):
        raise click.UsageError("give a card ID or --all (exactly one)")
    storage = _failure_cards(env)
    if card_id is None:  # --all
        count = len(storage.list_all())
        if not _confirmed(f"remove all {_plural(count, 'failure card', 'failure cards')}?", yes=yes):
            raise Refused("nothing removed")
        storage.clear_all()
        _outcome(env, {"cleared": count}, True, f"removed {_plural(count, 'card', 'cards')}", "")
        return
    full_id = storage.resolve_id(card_id)
    removed = storage.clear_by_id(full_id)
    missing = f"failure card not found: {card_id}"
    _outcome(env, {"id": full_id, "cleared": removed}, removed, f"removed {full_id}", missing)


@failures_group.command("prune")
@with_env
def failures_prune_command(env: Env) -> None:
    """Remove every invalidated or expired failure card."""
    removed = _failure_cards(env).prune_expired()
    if env.as_json:
        _emit_json({"pruned": removed})
    else:
        click.echo(f"pruned {_plural(removed, 'card', 'cards')}")


@failures_group.command("auto-invalidate")
@with_env
def failures_auto_invalidate_command(env: Env) -> None:
    """Apply the auto-invalidation rules.

    Rules come from .teaagent/config.json (defaults otherwise); prints the cards acted on per trigger.
    """
    counts = _failure_cards(env).apply_auto_invalidation()
    if env.as_json:
        _emit_json({"counts": counts})
    elif counts:
        click.echo(_fields(sorted(counts.items())))
    else:
        click.echo("no rules applied")


# ----------------------------------------------------------------------------- pins


def _pins(env: Env) -> PinnedFileStorage:
    from memstore.pinned import PinnedFileStorage

    return PinnedFileStorage(env.root)


@cli.command("pin")
@click.argument("path")
@with_env
def pin_command(env: Env, path: str) -> None:
    """Pin a file so agents keep it in context.

    PATH is relative to the root. Exit 1 when refused (secret, outside the root, missing, already pinned).
    """
    pinned = _pins(env).add(path)
    _outcome(
        env, {"path": path, "pinned": pinned}, pinned, f"pinned {path}", f"not pinned: {path} (see the warning above)"
    )


@cli.command("unpin")
@click.argument("path")
@with_env
def unpin_command(env: Env, path: str) -> None:
    """Unpin a file.

    Exit 1 when PATH was not pinned.
    """
    removed = _pins(env).remove(path)
    _outcome(env, {"path": path, "unpinned": removed}, removed, f"unpinned {path}", f"not pinned: {path}")


@cli.command("pinned")
@with_listing_env
def pinned_command(env: Env) -> None:
    """List pinned files."""
    pins = _pins(env).list_all()

    def human() -> str:
        if not pins:
            return "no pinned files"
        rows = [(out.one_line(pin.file_path), _iso(pin.pinned_at), _iso(pin.last_modified)) for pin in pins]
        return out.table(("PATH", "PINNED", "MODIFIED"), rows, flex=0, width=out.terminal_width())

    payload = reports.pins_report(pins)
    _emit_listing(env, payload, payload["pinned"], human)


# ----------------------------------------------------------------------------- team memory


def _team(env: Env) -> TeamMemory:
    from memstore.team import TeamMemory

    return TeamMemory(env.root)


@cli.group("team")
@_group_options
def team_group(root: Path | None, as_json: bool) -> None:
    """Team memory: shared one-line notes.

    Stored in .teaagent/team-memory.md.
    """


@team_group.command("add")
@click.argument("text", required=False)
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PATH",
              help="Read the note from this file (UTF-8).")
@with_env
def team_add_command(env: Env, text: str | None, path: Path | None) -> None:
    """Append TEXT to the team notes and print the written line.

    TEXT '-' reads the note from stdin; line breaks are joined into one line.
    """
    line = _team(env).add(_read_input(text, path, "TEXT"))
    if env.as_json:
        _emit_json({"line": line})
    else:
        click.echo(line)


@team_group.command("list")
@with_listing_env
def team_list_command(env: Env) -> None:
    """Print every team note, oldest first."""
    lines = _team(env).list()
    records = [{"line": line} for line in lines]
    _emit_listing(
        env, {"count": len(lines), "lines": lines}, records, lambda: "\n".join(lines) if lines else "no team notes"
    )


@team_group.command("remove")
@click.argument("text")
@click.option("--all", "every", is_flag=True, help="Remove every note containing TEXT, not just one.")
@with_env
def team_remove_command(env: Env, text: str, every: bool) -> None:
    """Remove the team note whose line contains TEXT.

    The notes file is rewritten atomically under its lock, every other line kept as it was.
    Exit 1 when no note or (without --all) more than one note contains TEXT.
    """
    removed = _team(env).remove(text, every=every)
    if env.as_json:
        _emit_json({"removed": removed, "count": len(removed)})
    else:
        click.echo("\n".join(f"removed {line}" for line in removed))


@team_group.command("prompt")
@click.option(
    "--tokens",
    type=click.IntRange(min=0),
    default=2048,
    show_default=True,
    help="Token budget (about 4 characters each) for the notes included.",
)
@with_env
def team_prompt_command(env: Env, tokens: int) -> None:
    """Print the team notes as an agent's prompt block.

    The newest notes that fit the token budget, oldest first.
    """
    prompt = _team(env).inject_prompt(limit_tokens=tokens)
    if env.as_json:
        _emit_json({"prompt": prompt, "tokens": tokens})
    else:
        click.echo(prompt)


# ----------------------------------------------------------------------------- recall


@cli.command("recall")
@click.argument("query")
@_limit_option(10, "results per tier")
@with_listing_env
def recall_command(env: Env, query: str, limit: int) -> None:
    """Search every memory tier at once.

    The project catalog, the personal one (~/.config/teaagent) and .claude/MEMORY.md.
    """
    from memstore.hierarchy import MemoryHierarchy
    from memstore.id_prefix import short_ids_among

    hierarchy = MemoryHierarchy(env.root, readonly=True)
    results = hierarchy.search_all(query, limit=limit)
    records = [{"tier": tier, **entry.to_dict()} for tier, entries in results.items() for entry in entries]
    catalogs = {"project": hierarchy.project, "personal": hierarchy.personal}

    def human() -> str:
        blocks = []
        for tier, entries in results.items():
            ids = [entry.memory_id for entry in entries]
            tier_catalog = catalogs.get(tier)
            short = tier_catalog.short_ids(ids) if tier_catalog is not None else short_ids_among(ids, ids)
            blocks.append(f"{tier} ({len(entries)})\n{_entries_table(entries, short, empty='no matches')}")
        return "\n\n".join(blocks)

    _emit_listing(env, reports.recall_report(query, results), records, human, ("tier", *ENTRY_COLUMNS))


# ----------------------------------------------------------------------------- export


@cli.group("export")
@_group_options
def export_group(root: Path | None, as_json: bool) -> None:
    """Write memories in other tools' formats."""


@export_group.command("claude-md")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PATH",
              help="The MEMORY.md to write (default: <root>/.claude/MEMORY.md).")
@with_env
def export_claude_md_command(env: Env, output: Path | None) -> None:
    """Write the most useful memories into Claude Code's MEMORY.md.

    Pinned files, blocking failure cards, team notes, curated and recent entries, within
    200 lines and 25 KB for the whole file. Only the section between memstore's markers is
    replaced; text a person wrote around it is kept.
    """
    from memstore.claude_md import export_claude_md

    report = export_claude_md(env.root, output=output)
    if env.as_json:
        _emit_json(report.to_dict())
    else:
        click.echo(f"wrote {report.path}: {report.items} items, {report.lines} lines, {report.bytes} bytes")


# ----------------------------------------------------------------------------- the index


PROGRESS_DELAY = 1.0
"""Index builds shorter than this show no bar."""


class _ProgressBar:
    """Feeds reindex(progress=...) into a click progress bar on stderr, shown once a build runs long."""

    def __init__(self, stack: contextlib.ExitStack, *, delay: float | None = None) -> None:
        self._stack = stack
        self._bar: Any = None
        self._done = 0
        self._show_after = time.monotonic() + (PROGRESS_DELAY if delay is None else delay)

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            if time.monotonic() < self._show_after:
                return
            bar = click.progressbar(length=max(total, 1), label="indexing", file=sys.stderr)
            self._bar = self._stack.enter_context(bar)
        self._bar.update(max(done - self._done, 0))
        self._done = done


def _catch_up_with_feedback(catalog: MemoryCatalog) -> None:
    """Bring the index up to date before a read, with a progress bar when that takes long.

    Only when stderr is a terminal; otherwise the read catches up silently as always.
    """
    if not _stderr_is_terminal() or not catalog.path.exists():
        return
    with contextlib.ExitStack() as stack, contextlib.suppress(MemstoreError):
        catalog.reindex(progress=_ProgressBar(stack))


@cli.command("reindex")
@click.option("--full", is_flag=True, help="Rebuild the index from scratch instead of catching it up.")
@click.option("--check", is_flag=True, help="Compare the index with a fresh scan; exit 1 when they differ.")
@_index_url_option
@click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="NAME=ROOT",
    help="With an index URL: catch this workspace up under this name (repeat for several; a ROOT alone takes"
    " its default name, <git remote or folder name>/memory.jsonl; default: this workspace).",
)
@with_env
def reindex_command(env: Env, full: bool, check: bool, index_url: str | None, sources: tuple[str, ...]) -> None:
    """Catch the search index up with the files.

    --full rebuilds it from scratch; --check verifies it against a fresh scan.

    With --index-url (or $MEMSTORE_INDEX_URL) the team index on PostgreSQL is fed instead:
    its schema is created or migrated, then every --source is caught up.
    """
    from memstore.maintenance import reindex_workspace

    url = _team_url(index_url)
    if url is not None:
        if check:
            raise click.UsageError("--check compares the local index; drop it with --index-url")
        _team_reindex(env, url, sources, full=full)
        return
    if sources:
        raise click.UsageError("--source needs --index-url or $MEMSTORE_INDEX_URL (a team index)")

    catalog = _catalog(env)
    payload: dict[str, Any] = {}
    if full or not check:
        with contextlib.ExitStack() as stack:
            progress = _ProgressBar(stack) if _stderr_is_terminal() else None
            report = reindex_workspace(catalog, full=full, progress=progress).to_dict()
        payload["reindex"] = report
    checked = catalog.check_index() if check else None
    if checked is not None:
        payload["check"] = checked.to_dict()
    if env.as_json:
        _emit_json(payload)
    else:
        if "reindex" in payload:
            click.echo(_fields(_flatten(payload["reindex"])))
        if checked is not None and checked.equal:
            click.echo(f"index matches the files: {checked.summary}".rstrip(": "))
    if checked is not None and not checked.equal:
        raise Refused(f"index differs from the files: {checked.summary}")


def _parse_sources(env: Env, given: Sequence[str]) -> dict[str, Path]:
    """``NAME=ROOT`` (or a ROOT alone, named by default) as {name: root}; none given: this workspace."""
    from memstore.source_name import default_source_name

    chosen: dict[str, Path] = {}
    for text in given or [str(env.root)]:
        name, equals, root = text.partition("=")
        if not equals:
            name, root = "", text
        if not root.strip():
            raise click.BadParameter(f"{text!r}: expected NAME=ROOT", param_hint="--source")
        path = Path(root).expanduser()
        if not path.is_dir():
            raise click.BadParameter(f"{text!r}: {path} is not a folder", param_hint="--source")
        name = name.strip() or default_source_name(path)
        if name in chosen:
            raise click.BadParameter(f"source {name!r} named twice", param_hint="--source")
        chosen[name] = path
    return chosen


def _team_reindex(env: Env, url: IndexUrl, given: Sequence[str], *, full: bool) -> None:
    from memstore.team_index import TeamIndex

    sources = _parse_sources(env, given)
    with TeamIndex(url) as team:
        report = team.reindex(sources, full=full)
    if env.as_json:
        _emit_json(report.to_dict())
        return
    click.echo(f"team index {report.url}: schema {report.schema}")
    for source in report.sources:
        cards = "" if source.cards is None else f", {_plural(source.cards, 'card', 'cards')}"
        click.echo(
            f"{out.one_line(source.name)}: {source.action}, {_plural(source.entries, 'entry', 'entries')}"
            f" (+{source.added}), {_bytes(source.bytes_indexed)} indexed{cards}, {source.seconds:.3f} s"
        )


def _status_row(source: IndexState) -> tuple[str, ...]:
    from memstore.index.report import SourceStatus

    if not isinstance(source, SourceStatus):  # an index the store does not ask: only its state
        return (out.one_line(source.source or "?", None), source.state, "-", "-", "-", "-", "-")
    return (
        out.one_line(source.source, None),
        source.state,
        str(source.entries),
        _bytes(source.bytes_indexed),
        _bytes(source.bytes_behind),
        _bytes(source.source_bytes),
        _bytes(source.index_bytes),
    )


def _status_text(status: WorkspaceStatus) -> str:
    from memstore.index.report import SourceStatus

    files = sorted({source.index_path for source in status.sources if isinstance(source, SourceStatus)})
    rows = [_status_row(source) for source in status.sources]
    headers = ("SOURCE", "STATE", "ENTRIES", "INDEXED", "BEHIND", "FILE SIZE", "INDEX SIZE")
    return f"index: {', '.join(files) or '-'}\n" + out.table(headers, rows)


@cli.command("status")
@with_env
def status_command(env: Env) -> None:
    """Show the index state per source.

    Entries, bytes indexed, bytes behind, file and index sizes.
    """
    from memstore.maintenance import workspace_index_status

    status = workspace_index_status(_catalog(env, for_reading=True))
    if env.as_json:
        _emit_json({"index": status.to_dict()})
    else:
        click.echo(_status_text(status))


# ----------------------------------------------------------------------------- watch


@cli.command("watch")
@click.option(
    "--debounce-ms",
    type=click.IntRange(min=0),
    default=500,
    show_default=True,
    help="Wait this long after a change event before acting on it.",
)
@with_env
def watch_command(env: Env, debounce_ms: int) -> None:
    """Keep the index caught up while the files change.

    Runs until Ctrl-C or SIGTERM.
    """
    import logging
    import signal

    from memstore.watch_loop import IndexWatch

    def report(action: Mapping[str, Any]) -> None:
        if env.as_json:
            click.echo(reports.json_text(action, indent=None))

    log_handler = logging.StreamHandler(sys.stderr)
    stamp = logging.Formatter(f"%(asctime)s {PROG} watch: %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")
    stamp.converter = time.gmtime  # ISO 8601 in UTC, like every other time the command prints
    log_handler.setFormatter(stamp)
    watch_logger = logging.getLogger("memstore.watch_loop")
    watch_logger.handlers[:] = [log_handler]
    watch_logger.setLevel(logging.INFO)
    watch_logger.propagate = False
    watch = IndexWatch(env.root, debounce_ms=debounce_ms, on_action=report)

    def stop(signum: int, _frame: object) -> None:
        watch.request_stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        watch.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# ----------------------------------------------------------------------------- mcp


@cli.command("mcp")
@_root_option()
@click.option(
    "--allow-destructive",
    is_flag=True,
    help="Also offer memory_delete_by_branch and memory_quarantine_by_branch.",
)
@click.pass_context
def mcp_command(ctx: click.Context, root: Path | None, allow_destructive: bool) -> None:
    """Serve this workspace's memory to an agent over MCP (stdio).

    Runs until the client closes stdin. See docs/cli.md for the tools and resources.
    """
    env = _resolve_env(ctx, root, False, None)
    if not env.root.is_dir():
        raise Refused(f"root is not a directory: {env.root}")
    try:
        from memstore.mcp_server import serve
    except ImportError as exc:
        raise Refused(f"memstore mcp needs the MCP SDK: pip install 'memstore[mcp]' ({exc})") from None

    serve(env.root, allow_destructive=allow_destructive)


# ----------------------------------------------------------------------------- entry point


def _configure_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")
    when_loaded(_log_to_stderr)  # a command that logs nothing never imports logging


def _log_to_stderr() -> None:
    """Library warnings (an index answered by a scan) go to stderr as ``memstore: warning: ...``."""
    import logging

    class StderrFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"{PROG}: {record.levelname.lower()}: {record.getMessage()}"

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StderrFormatter())
    logger = logging.getLogger("memstore")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.WARNING)
    logger.propagate = False


def _error(message: str) -> None:
    flat = " ".join(message.split()) or "unknown error"
    click.echo(f"{PROG}: error: {flat}", err=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script passes it to sys.exit)."""
    _configure_output()
    try:
        args = list(argv) if argv is not None else None
        result = cli.main(args=args, prog_name=PROG, standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.format_message(), err=True)
        return EXIT_USAGE
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        _error(exc.format_message() + hint)
        return EXIT_USAGE
    except click.Abort:
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        _error(exc.format_message())
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Refused as exc:
        _error(str(exc))
        return EXIT_REFUSED
    except BrokenPipeError:
        # The reader went away (``memstore list | head``): quietly stop writing.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_REFUSED
    except (MemstoreError, OSError, ValueError, TypeError, ImportError) as exc:
        _error(describe(exc))
        return EXIT_REFUSED
    return result if isinstance(result, int) else 0

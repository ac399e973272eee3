"""docs/cli.md and the command agree: every command is documented, every documented command exists."""

from __future__ import annotations

import re
from pathlib import Path

import click

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def command_paths() -> set[str]:
    """Every runnable command: the leaves, and groups that act on their own (``quarantined``)."""
    from memstore.cli import cli

    found: set[str] = set()

    def walk(command: click.Command, path: str) -> None:
        if isinstance(command, click.Group):
            if command.invoke_without_command:
                found.add(path)
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")
        else:
            found.add(path)

    walk(cli, "memstore")
    return found


def documented_paths() -> set[str]:
    """The command words of each ``### `memstore ...``` heading, up to the first argument or option."""
    found: set[str] = set()
    for heading in re.findall(r"^### `(memstore[^`]*)`", DOC.read_text(encoding="utf-8"), re.M):
        words = []
        for word in heading.split():
            if not re.fullmatch(r"[a-z][a-z-]*", word):
                break
            words.append(word)
        found.add(" ".join(words))
    return found


def test_every_command_is_documented_and_every_documented_command_exists() -> None:
    commands, documented = command_paths(), documented_paths()
    assert commands - documented == set(), "commands missing from docs/cli.md"
    assert documented - commands == set(), "docs/cli.md documents commands that do not exist"


def test_every_option_of_a_command_is_mentioned_in_its_section() -> None:
    from memstore.cli import cli

    text = DOC.read_text(encoding="utf-8")
    shared = {"--root", "--json", "--help", "-h", "--format", "--version"}
    for path in command_paths():
        words = path.split()[1:]
        command: click.Command = cli
        for word in words:
            command = command.commands[word]  # type: ignore[attr-defined]
        start = text.index(f"### `{path}")
        end = text.find("\n## ", start)
        section = text[start : end if end > 0 else len(text)]
        for param in command.params:
            if isinstance(param, click.Option):
                names = [name for name in param.opts if name not in shared]
                if names:
                    assert any(name in section for name in names), (path, names)

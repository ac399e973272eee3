"""Finding the workspace root from where a command runs (CLI and servers; libraries take a root).

Order: an explicit root, then ``MEMSTORE_ROOT``, then the nearest ancestor of the
working directory that holds ``.teaagent/``, then the top of the enclosing git work
tree (``.git`` as a folder, or as a file in a worktree or submodule), then the
working directory itself.  An agent working in ``src/`` thus shares the
repository's store instead of silently starting a second, empty one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from memstore.errors import InvalidArgumentError
from memstore.layout import STORE_DIRNAME

ROOT_ENV = "MEMSTORE_ROOT"


def find_root(
    explicit: str | os.PathLike[str] | None = None,
    *,
    start: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """The workspace root: ``explicit`` > ``$MEMSTORE_ROOT`` > nearest ``.teaagent/`` > git top > ``start``.

    ``start`` defaults to the working directory and ``environ`` to ``os.environ``.  A
    given root (explicit or from the environment) must be an existing directory:
    otherwise :class:`~memstore.errors.InvalidArgumentError`, because creating a
    mistyped path would hide the mistake.  Discovery itself touches nothing.
    """
    env = os.environ if environ is None else environ
    given = explicit if explicit is not None else (env.get(ROOT_ENV) or None)
    if given is not None:
        source = "--root" if explicit is not None else ROOT_ENV
        path = Path(given)
        if not path.exists():
            raise InvalidArgumentError(f"{source}: directory does not exist: {path}")
        if not path.is_dir():
            raise InvalidArgumentError(f"{source}: not a directory: {path}")
        return path
    here = Path(os.getcwd() if start is None else start).absolute()
    ancestors = [here, *here.parents]
    for folder in ancestors:
        if (folder / STORE_DIRNAME).is_dir():
            return folder
    for folder in ancestors:
        if (folder / ".git").exists():
            return folder
    return here

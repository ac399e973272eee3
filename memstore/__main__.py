"""``python -m memstore``: the same command as the ``memstore`` console script."""

from __future__ import annotations

from memstore.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

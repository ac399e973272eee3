"""Restricting search and list to entries with given tags, branch or run.

One definition (:meth:`EntryFilter.admits`) is the reference: the scan applies it
directly and the index translates it into SQL, and the two must agree exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from memstore.checks import optional_str
from memstore.errors import InvalidArgumentError
from memstore.models import MemoryEntry, tag_values


class EntryFilter(NamedTuple):
    """Every tag must be among the entry's tags; branch and run, when given, must be equal."""

    tags: tuple[str, ...] = ()
    branch_name: str | None = None
    run_id: str | None = None

    @classmethod
    def of(
        cls, *, tags: Iterable[str] = (), branch_name: str | None = None, run_id: str | None = None
    ) -> EntryFilter:
        """A checked filter; tags are normalised as entries' tags are (stripped, lowercased)."""
        values = tag_values(tags)
        if not all(values):
            raise InvalidArgumentError("a tag filter cannot be empty")
        wanted = set(values)
        return cls(
            tags=tuple(sorted(wanted)),
            branch_name=optional_str("branch_name", branch_name),
            run_id=optional_str("run_id", run_id),
        )

    @property
    def empty(self) -> bool:
        return not self.tags and self.branch_name is None and self.run_id is None

    def admits(self, entry: MemoryEntry) -> bool:
        if self.branch_name is not None and entry.branch_name != self.branch_name:
            return False
        if self.run_id is not None and entry.run_id != self.run_id:
            return False
        return all(tag in entry.tags for tag in self.tags)


NO_FILTER = EntryFilter()

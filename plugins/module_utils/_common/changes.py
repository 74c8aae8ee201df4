# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its API may change in any release without notice, and other
# collections must not import it.
"""One change tracker for every module: what changed, and the `diff` Ansible shows for it.

A module records each change as it decides it (a name - a file's path or a setting's - with the value
before and after), asks whether anything changed, and puts the tracker's diff in its result. The diff is
there only when the task runs with --diff (`module._diff`), and always has the shape Ansible renders: one
dict with before/after and before_header/after_header per changed entry, a list of them when there are
several (or always, for a module that manages several files). Unchanged entries are left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


class FileChange(Protocol):
    """Anything with a path and its content before and after (None = absent), such as files.FileResult."""

    path: str
    before: str | None
    after: str | None


@dataclass
class Change:
    name: str
    before: object
    after: object

    @property
    def changed(self) -> bool:
        return self.before != self.after


def _shown(value: object) -> object:
    """A value as a diff side: text as it is, absent as empty, a mapping for Ansible to render, else JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    return json.dumps(value, sort_keys=True) + "\n"


class ChangeTracker:
    """The changes a module makes, in the order it decided them.

    diff_mode: whether the task runs with --diff (pass `module._diff`); without it `diff()` is None.
    always_list: return the diff as a list even with one entry (a module that may change several files,
    so that its diff has one type).
    """

    def __init__(self, diff_mode: bool, *, always_list: bool = False) -> None:
        self.diff_mode = bool(diff_mode)
        self.always_list = always_list
        self._changes: dict[str, Change] = {}

    def add(self, name: str, before: object, after: object) -> bool:
        """Record a change of `name`; returns whether it is one. A name recorded again keeps its first
        `before` and takes the new `after` (two edits of one file are one change)."""
        if name in self._changes:
            self._changes[name].after = after
        else:
            self._changes[name] = Change(name, before, after)
        return self._changes[name].changed

    def add_file(self, result: FileChange) -> bool:
        """Record a file's change, named by its path."""
        return self.add(result.path, result.before, result.after)

    @property
    def changed(self) -> bool:
        return any(c.changed for c in self._changes.values())

    def changes(self) -> list[Change]:
        """The entries that changed, in order."""
        return [c for c in self._changes.values() if c.changed]

    def diff(self) -> dict[str, object] | list[dict[str, object]] | None:
        """The `diff` of a module result; None without diff mode or without a change."""
        if not self.diff_mode:
            return None
        entries: list[dict[str, object]] = [
            {"before_header": c.name, "after_header": c.name, "before": _shown(c.before), "after": _shown(c.after)}
            for c in self.changes()]
        if not entries:
            return None
        return entries if self.always_list or len(entries) > 1 else entries[0]

    def update(self, result: dict[str, object]) -> dict[str, object]:
        """`result` with its `diff` set when there is one to show (and none left over when there is not)."""
        diff = self.diff()
        if diff is None:
            result.pop("diff", None)
        else:
            result["diff"] = diff
        return result

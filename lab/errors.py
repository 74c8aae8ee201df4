"""The one exception the lab raises for a problem the user can fix; the CLI prints it on one line."""

from __future__ import annotations


class LabError(Exception):
    """A problem with the lab's input or its host, described in one line."""

"""Retry a step that fetches something over the network, a bounded number of times, backing off between tries.

The caller says which failures are transient (worth another try) with a classifier that returns a short
description of what failed ("could not download package libc6"), or None for a real error, which is raised
at once. When the attempts run out, RetriesExhausted names what failed and how many attempts were made.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .errors import LabError

T = TypeVar("T")

# The sleep the helper uses unless it is given one; tests replace it so they never wait.
SLEEP: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class Backoff:
    """At most `attempts` tries; before try n+1 wait first * factor**(n-1) seconds, never more than cap."""

    attempts: int = 4
    first: float = 2.0
    factor: float = 2.0
    cap: float = 30.0

    def delays(self) -> list[float]:
        """The waits between the attempts, in order (one fewer than the attempts)."""
        return [min(self.cap, self.first * self.factor**i) for i in range(max(self.attempts - 1, 0))]


class RetriesExhausted(LabError):
    """A transient failure that outlasted every attempt."""

    def __init__(self, what: str, reason: str, attempts: int, last: Exception) -> None:
        super().__init__(f"{what}: {reason}, still failing after {attempts} attempts: {last}")
        self.what = what
        self.reason = reason
        self.attempts = attempts
        self.last = last


def retry(
    action: Callable[[], T],
    *,
    what: str,
    transient: Callable[[Exception], str | None],
    policy: Backoff | None = None,
    sleep: Callable[[float], None] | None = None,
    on_retry: Callable[[int, float, str], None] | None = None,
) -> T:
    """Run action until it succeeds, a failure is not transient, or policy.attempts tries have failed.

    on_retry(attempt that failed, seconds before the next, reason) is called before each wait.
    """
    policy = policy or Backoff()
    wait = sleep or SLEEP
    delays = policy.delays()
    attempt = 0
    while True:
        attempt += 1
        try:
            return action()
        except Exception as exc:
            reason = transient(exc)
            if reason is None:
                raise
            if attempt >= policy.attempts:
                raise RetriesExhausted(what, reason, attempt, exc) from exc
            delay = delays[attempt - 1]
            if on_retry is not None:
                on_retry(attempt, delay, reason)
            wait(delay)


def note_retry(log: Path, what: str) -> Callable[[int, float, str], None]:
    """An on_retry callback: one line in the step's log and on stderr, so a slower build says why."""

    def note(attempt: int, delay: float, reason: str) -> None:
        line = f"{what}: {reason}; attempt {attempt} failed, trying again in {delay:g}s"
        with log.open("a") as out:
            out.write(f"# {line}\n")
        print(f"lab: {line}", file=sys.stderr, flush=True)

    return note

"""The cgroup helpers the lab's machines and the lanes of `make test` share: where this process's cgroups are, and
removing a cgroup tree.

Kept apart from both (lanes.py is CI timing, machines.py the machine layer), so that the machine layer does not
import the lanes or the timing.
"""

from __future__ import annotations

import errno
import time
from pathlib import Path


def parse_own(text: str) -> dict[str, str]:
    """The caller's cgroup path per hierarchy, from /proc/self/cgroup: each v1 controller by name, 'v2' for '0::'."""
    own: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hid, controllers, path = fields
        if hid == "0" and controllers == "":
            own["v2"] = path
        for controller in controllers.split(","):
            if controller:
                own[controller] = path
    return own


def remove_cgroup(path: Path, busy_for: float = 30.0) -> None:
    """Remove a cgroup and the (empty) cgroups below it, deepest first.

    A cgroup whose last process has just exited can still answer EBUSY for a moment while the kernel
    lets go of it (seen on journald's cgroup right after a machine powered off, for over 10 s on a loaded
    2-core CI machine after the driver upgrade's reboots): such a directory is tried again for up to
    `busy_for` seconds before the error is raised.
    """
    if not path.is_dir():
        return
    deadline = time.monotonic() + busy_for
    for sub in [*sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True), path]:
        while True:
            try:
                sub.rmdir()
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

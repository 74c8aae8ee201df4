"""One at a time on this host, for the lab steps that would race when two runs do them at once.

`make test` runs lab-test beside molecule scenarios, so two lab clusters can start at the same moment: kwokctl
gives its components the first ports it can bind counting down from 32767 (sigs.k8s.io/kwok pkg/utils/net), so two
creates at once pick the same ones (seen in CI: one create waited out its timeout). The lock is a file under the
lab's cache, held with flock(2) for the length of the step; the kernel drops it when the holder exits, however it
exits.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator

from .images import cache_dir


@contextlib.contextmanager
def host_lock(name: str) -> Iterator[None]:
    path = cache_dir() / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)

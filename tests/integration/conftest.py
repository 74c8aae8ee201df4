from __future__ import annotations

import os
import shutil

import pytest

from lab.distros import DISTROS
from lab.images import ensure_images


@pytest.fixture(scope="session", autouse=True)
def lab_host():
    """These tests boot real machines: they need root and the lab's host tools, and fail (not skip) without."""
    if os.geteuid() != 0:
        pytest.fail("the lab tests boot systemd-nspawn machines and must run as root")
    missing = [t for t in ("systemd-nspawn", "debootstrap", "ssh", "zstd") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"missing host tools {missing}: run 'make lab-deps'")
    # Build or reuse the images before anything is timed.
    ensure_images(list(DISTROS.values()))

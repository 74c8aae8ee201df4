"""The Debian-family releases a role claims (its meta/main.yml platforms) are releases a molecule scenario boots.

What the collection says it supports is what a test runs: a codename added to a role's platforms without a lab machine
of that release in a scenario fails here. (EL's claims are judged by the unit tests' recorded dnf and rpm output: the
lab has no EL machine.)
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def claimed() -> dict[str, set[str]]:
    """{codename: roles claiming it} over every role's Ubuntu and Debian platforms."""
    found: dict[str, set[str]] = {}
    for meta in sorted(ROOT.glob("roles/*/meta/main.yml")):
        for platform in (yaml.safe_load(meta.read_text()).get("galaxy_info") or {}).get("platforms") or []:
            if platform.get("name") in ("Ubuntu", "Debian"):
                for version in platform.get("versions") or []:
                    found.setdefault(str(version), set()).add(meta.parts[-3])
    return found


def booted() -> set[str]:
    """The releases of the lab machines the molecule scenarios boot."""
    return {str(p["distro"]) for m in ROOT.glob("molecule/*/molecule.yml")
            for p in yaml.safe_load(m.read_text()).get("platforms") or [] if "distro" in p}


def test_every_claimed_release_is_booted_by_a_scenario():
    claims = claimed()
    assert claims, "no role claims an Ubuntu or Debian release"
    assert {release: sorted(roles) for release, roles in claims.items() if release not in booted()} == {}


def test_ubuntu_26_04_is_claimed_by_the_roles_node_yml_runs_only():
    """Its scenario runs node.yml; the day-2 roles' host parts (driver_upgrade, mig_reconfigure) are not run there."""
    assert claimed()["resolute"] == {"preflight", "node_common", "nouveau", "rdma", "driver", "fabric_manager", "container_toolkit"}

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""Decisions the host roles make on the controller from what their modules read: whether the toolkit's packages are
in at the version asked, whether the container runtime took its config after a restart, what keeps the NVLink fabric
down, whether the driver role changed the node. Pure functions; the filters of the same names
(plugins/filter/node_roles.py) call them from the roles' tasks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# containerd's CRI plugin, as `ctr plugins ls` lists it (1.x: io.containerd.grpc.v1 cri; 2.x: io.containerd.cri.v1
# runtime), followed by its status.
_CRI_PLUGIN = re.compile(r"^io\.containerd\.(grpc\.v1\s+cri|cri\.v1\s+runtime)\s")
_PLUGIN_OK = re.compile(r"\sok\s*$")


def toolkit_version(version: str) -> str:
    """The toolkit version as apt matches it: an upstream version without its package revision matches any revision."""
    return version if "-" in version else f"{version}-*"


def toolkit_installed(packages: Any, package: str, version: str) -> bool:
    """Whether every package the role installs is in (`packages`: name to installed version, null where missing, as the
    role's check read them; None where it did not read them: unknown, so no), `package` at `version` where one is asked
    (1.18.2 matches any revision of it, 1.18.2-1 only itself)."""
    if not isinstance(packages, Mapping) or any(found is None for found in packages.values()):
        return False
    if not version:
        return True
    wanted, found = toolkit_version(version), str(packages.get(package))
    return found == wanted or (wanted.endswith("-*") and found.startswith(wanted[:-1]))


def runtime_load_errors(lines: Any, runtime: str, handler: str) -> list[str]:
    """What says the runtime did not take its config after a restart: for containerd, its CRI plugin's lines of `ctr
    plugins ls` with a status other than ok (it stays up when the plugin rejects the config); for CRI-O, its log lines
    since the restart that say the nvidia runtime handler is ignored (it stays up and drops the handler)."""
    lines = [str(line) for line in lines or []]
    if runtime == "containerd":
        return [line for line in lines if _CRI_PLUGIN.match(line) and not _PLUGIN_OK.search(line)]
    ignored = re.compile(rf"Runtime handler .{{0,2}}{re.escape(handler)}.{{0,2}} is being ignored")
    return [line for line in lines if ignored.search(line)]


def fabric_problems(gpus: Any, active: str, service: str) -> list[str]:
    """What keeps the NVLink fabric down, each said once: the daemon not active (`active`, as `systemctl is-active`
    says it), a GPU whose fabric is not completed yet, one that completed with an error (NVML's)."""
    fabrics = [gpu.get("fabric") or {} for gpu in gpus or []]
    problems = [] if active == "active" else [f"{service} is {active}"]
    for fabric in fabrics:
        if fabric.get("state") not in ("completed", "not_supported"):
            problems.append(f"a GPU is still {fabric.get('state')}")
    for fabric in fabrics:
        if fabric.get("state") == "completed" and fabric.get("status") != "success":
            problems.append(f"a GPU failed to join: {fabric.get('status')}")
    return list(dict.fromkeys(problems))


def driver_changes(plan: Any, installed: Any, hold: bool) -> bool:
    """Whether the driver role's turn changed the node, or may have (an unknown result counts): a file or package
    changed, an install planned, a hold to add, or a source other than the distribution's archive (the CUDA repository,
    the driver container)."""
    if not isinstance(plan, Mapping):
        return True
    planned = plan.get("plan") or {}
    if plan.get("changed", True) or planned.get("install") or planned.get("repository") == "cuda":
        return True
    if planned.get("method") == "containerized":
        return True
    return bool(hold and (installed or {}).get("not_held"))

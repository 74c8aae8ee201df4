# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""A run's summary, for AWX (set_stats, per_host: false) and a JSON report file: what blocks each node, which nodes
changed, which need a reboot or had one, and the validation's verdicts. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION = 1


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def summary(hosts: list[str], hostvars: Mapping[str, Any], validation: Any = None, failed: list[str] | None = None) -> dict[str, Any]:
    """The summary of the hosts' published results (gpuops_preflight, gpuops_node_changed, gpuops_driver and
    gpuops_nouveau's reboot_required, the nouveau role's reboot), and of the validation module's result where it ran.
    `failed`: hosts known to have failed or been unreachable; a host whose GPUs were never read (no gpuops_gpu_info:
    unreachable, or failed before the preflight's read) is listed in `not_read_hosts`."""
    blockers: dict[str, list[dict[str, str]]] = {}
    warnings: dict[str, list[str]] = {}
    changed, reboot_required, rebooted = [], [], []
    not_read = []
    for host in hosts:
        hv = _mapping(hostvars.get(host))
        if not _mapping(hv.get("gpuops_gpu_info")):
            not_read.append(host)
        found = _mapping(hv.get("gpuops_preflight")).get("findings") or []
        blocking = [{"id": f["id"], "message": f["message"], "fix": f["fix"]} for f in found if f.get("severity") == "blocker"]
        if blocking:
            blockers[host] = blocking
        warned = [f["id"] for f in found if f.get("severity") == "warning"]
        if warned:
            warnings[host] = warned
        if hv.get("gpuops_node_changed") is True:
            changed.append(host)
        reasons = [r for role in ("gpuops_nouveau", "gpuops_driver") if _mapping(hv.get(role)).get("reboot_required") is True
                   for r in ([_mapping(hv.get(role)).get("reboot_reason")] if role == "gpuops_nouveau"
                             else _mapping(hv.get(role)).get("reboot_reasons") or []) if r]
        after = _mapping(hv.get("__gpuops_nouveau_after"))
        if after and not after.get("skipped"):
            rebooted.append(host)
        elif reasons or any(_mapping(hv.get(role)).get("reboot_required") is True for role in ("gpuops_nouveau", "gpuops_driver")):
            reboot_required.append({"host": host, "reasons": reasons})
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "ok": not blockers and not (failed or []) and not not_read,
        "hosts": len(hosts),
        "failed_hosts": sorted(failed or []),
        "not_read_hosts": not_read,
        "blocked_hosts": sorted(blockers),
        "blockers": blockers,
        "warnings": warnings,
        "changed_hosts": changed,
        "reboot_required": reboot_required,
        "rebooted_hosts": rebooted,
        "validation": None,
    }
    result = _mapping(validation)
    if result and not result.get("skipped") and "nodes" in result:
        nodes = _mapping(result.get("nodes"))
        failed_nodes = list(result.get("failed_nodes") or [])
        out["validation"] = {
            "ok": not failed_nodes and not result.get("failed"),
            "failed_nodes": failed_nodes,
            "verdicts": {name: ("ok" if _mapping(node).get("ok") else "failed") for name, node in nodes.items()},
        }
        out["ok"] = out["ok"] and out["validation"]["ok"]
    return out

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling driver upgrade's decisions: where a node stands, what to pause, what to wait for, what to unload.

The names are the GPU Operator's upgrade controller's (k8s-operator-libs pkg/upgrade/consts.go) and its driver
manager's (k8s-driver-manager): the state label, the skip label, the record of the node's cordon before the
upgrade, and the `paused-for-driver-upgrade` value of the components' deploy labels. A node the operator was
upgrading reads the same to this collection, and the other way round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.rules import DEPLOY_PREFIX

STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
INITIAL_STATE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
PAUSED = "paused-for-driver-upgrade"
DONE = "upgrade-done"
FAILED = "upgrade-failed"
# The driver's own deploy label (`pre-installed` on a host driver) is not a component to pause.
NOT_PAUSED = frozenset({DEPLOY_PREFIX + "driver"})
# The NVIDIA kernel modules, users before what they use: modprobe -r takes them in this order.
UNLOAD_ORDER = ("nvidia_peermem", "nv_peer_mem", "nvidia_fs", "gdrdrv", "nvidia_vgpu_vfio", "nvidia_drm", "nvidia_modeset",
                "nvidia_uvm", "nvidia", "nvidia_current")


def paused_value(value: str) -> str:
    """The value a deploy label gets while the driver is upgraded (the driver manager's rule)."""
    if value == PAUSED or value.endswith("_" + PAUSED):
        return value
    return PAUSED if value == "true" else f"{value}_{PAUSED}"


def restored_value(value: str) -> str:
    """The value a paused deploy label had before (the inverse of paused_value)."""
    if value == PAUSED:
        return "true"
    return value[: -len("_" + PAUSED)] if value.endswith("_" + PAUSED) else value


def _deploy_labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: str(v) for k, v in sorted(labels.items()) if k.startswith(DEPLOY_PREFIX) and k not in NOT_PAUSED}


def pause_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The deploy labels to set so that the GPU components leave the node: only those that change."""
    return {k: paused_value(v) for k, v in _deploy_labels(labels).items() if paused_value(v) != v}


def restore_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The paused deploy labels put back to their values before: only those that change."""
    return {k: restored_value(v) for k, v in _deploy_labels(labels).items() if restored_value(v) != v}


def _node_selector(daemonset: Mapping[str, Any]) -> dict[str, str]:
    spec = (daemonset.get("spec") or {}).get("template", {}).get("spec") or {}
    return {k: str(v) for k, v in (spec.get("nodeSelector") or {}).items()}


def waiting_pods(pods: list[Mapping[str, Any]], daemonsets: list[Mapping[str, Any]], labels: Mapping[str, str]) -> list[str]:
    """The pods still on the node of the DaemonSets whose node selector the node's (paused) labels no longer match.

    pods: the namespace's pods on the node; daemonsets: the namespace's DaemonSets; labels: the Node's labels now.
    """
    gone = set()
    for ds in daemonsets:
        selector = _node_selector(ds)
        if any(k.startswith(DEPLOY_PREFIX) for k in selector) and any(labels.get(k) != v for k, v in selector.items()):
            gone.add(ds.get("metadata", {}).get("name"))
    waiting = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        owners = {o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "DaemonSet"}
        if owners & gone and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            waiting.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return sorted(waiting)


def running_units(units: list[str], states: list[str], recorded: str = "") -> list[str]:
    """The units of `units` that were running: `states` is what `systemctl is-active` printed for them, a line each;
    then those `recorded` (comma-separated: the units a failed run stopped, as the Node's annotation keeps them), which
    a resumed run starts again even though they are not running now."""
    stopped = [u for u in dict.fromkeys(x.strip() for x in recorded.split(",")) if u]
    out = [unit for unit, state in zip(units, states, strict=False) if state == "active"]
    out = [u for u in units if u in out or u in stopped]
    return out + [u for u in stopped if u not in out]


def drain_scope(plan: Mapping[str, Any], reboot: str, pods: str, selector: str) -> dict[str, Any]:
    """The drain before the host changes: the Pods of the user's choice (`pods`, narrowed by `selector`), unless the
    node will reboot whatever the unload does (a new kernel, `reboot: always`, no module loaded to unload and load
    again): a reboot kills every Pod, so every Pod is evicted first (PodDisruptionBudgets honoured), not a subset."""
    reboots = bool(plan.get("kernel_change")) or reboot == "always" or not plan.get("unload")
    if reboots or pods == "all":
        return {"pods": "all", "pod_selector": "" if reboots else selector, "reboots": reboots}
    return {"pods": pods, "pod_selector": selector, "reboots": False}


def unload_order(loaded: list[str]) -> list[str]:
    """The loaded NVIDIA modules in the order modprobe -r takes them: users first, nvidia last."""
    names = [m.replace("-", "_") for m in loaded]
    known = [m for m in UNLOAD_ORDER if m in names]
    others = sorted(m for m in names if m.startswith(("nvidia", "nv_", "gdrdrv")) and m not in UNLOAD_ORDER)
    return others + known


def node_plan(gpu_info: Mapping[str, Any], driver: Mapping[str, Any], node: Mapping[str, Any] | None, kernel_release: str,
              node_name: str) -> dict[str, Any]:
    """Where one node stands against the target, from its facts, the driver role's plan (driver_info) and its Node.

    Returns errors (nothing changed yet), skip (why the node is left alone, or ''), done (at the target and no
    upgrade of an earlier run to finish: the cluster is not touched), resume (an earlier run left the node mid-way),
    the driver before and after, the kernel, the reboot's reasons so far, and a one-line summary.
    """
    plan = driver.get("plan") or {}
    installed = driver.get("installed") or {}
    facts_node = gpu_info.get("node") or {}
    modules = facts_node.get("modules") or {}
    running = (facts_node.get("kernel") or {}).get("running")
    loaded = modules.get("version") or (gpu_info.get("nvml") or {}).get("driver_version")
    meta = (node or {}).get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    state = labels.get(STATE_LABEL, "")
    errors = []
    if node is None or not node:
        errors.append(f"no Node named {node_name} in the cluster (gpuops_cluster_node_name sets the Node of an inventory host)")
    resume = bool(node) and (INITIAL_STATE in annotations or state not in ("", DONE))
    packages_missing = bool(plan.get("install"))
    kernel_wrong = bool(kernel_release) and running != kernel_release
    driver_not_running = bool(installed.get("version")) and loaded != installed.get("version")
    at_target = not packages_missing and not kernel_wrong and not driver_not_running
    skip = ""
    if labels.get(SKIP_LABEL) == "true":
        skip = f"{SKIP_LABEL}=true: left alone"
    elif not gpu_info.get("summary", {}).get("gpu_count") and not installed.get("version"):
        skip = "no NVIDIA GPU and no driver: nothing to upgrade"
    reasons = []
    if kernel_wrong:
        reasons.append(f"the node runs kernel {running}; the upgrade boots {kernel_release}")
    elif plan.get("kernel") and running and plan["kernel"] != running:
        reasons.append(f"the driver is planned for kernel {plan['kernel']}; the node runs {running}")
    before = f"{loaded or 'no driver loaded'}" + (f" (installed {installed['version']})" if installed.get("version") and installed["version"] != loaded else "")
    after = f"branch {plan.get('branch')}" + (f" {plan.get('method')}" if plan.get("method") else "")
    if packages_missing:
        summary = f"driver {before} -> {after}: installs {', '.join(plan.get('packages') or [])}"
    elif driver_not_running:
        summary = f"driver {before}: installed, not running yet"
    else:
        summary = f"driver {loaded} (branch {plan.get('branch')}) at the target"
    if kernel_wrong:
        summary += f"; kernel {running} -> {kernel_release}"
    if resume:
        summary += f"; resumes the upgrade an earlier run left at {state or 'cordon'}"
    return {
        "errors": errors,
        "skip": skip,
        "done": bool(at_target and not resume) and not errors,
        "resume": resume,
        "state": state,
        "at_target": at_target,
        "install": packages_missing,
        "kernel_change": kernel_wrong,
        "reboot_reasons": reasons,
        "loaded": loaded,
        "summary": summary,
        "pause": pause_labels(labels),
        "unload": unload_order(list(modules.get("nvidia") or [])),
    }


def lost_hosts(removed: list[str], hostvars: Any, started: str, ended: list[str]) -> dict[str, str]:
    """The hosts a day-2 run lost mid-change, with their Node names: of the hosts the play removed (failed or
    unreachable), those whose `started` result is there (registered, not skipped; any host with `started` empty) and
    none of `ended` (the rescue's or the last step's result). Ansible runs no rescue for an unreachable host, so nothing else records it."""
    out = {}
    for host in removed:
        values = hostvars.get(host, {})
        begun = values.get(started) if started else {}
        if isinstance(begun, Mapping) and not begun.get("skipped") and not any(e in values for e in ended):
            out[host] = str(values.get("gpuops_cluster_node_name") or host)
    return out


def _unavailable(node: Mapping[str, Any]) -> str:
    """Why a Node cannot take pods now ('' when it can): the upgrade controller's test (cordoned, or not Ready), and a
    failed upgrade (which the controller also leaves cordoned)."""
    meta = node.get("metadata") or {}
    reasons = []
    if (node.get("spec") or {}).get("unschedulable"):
        reasons.append("cordoned")
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, Mapping)}
    if conditions.get("Ready") != "True":
        reasons.append("not Ready")
    if (meta.get("labels") or {}).get(STATE_LABEL) == FAILED:
        reasons.append(FAILED)
    return ", ".join(reasons)


def budget(nodes: list[Mapping[str, Any]], run: list[str], batch: list[str] | None, max_unavailable: Any,
           variable: str = "gpuops_upgrade_max_unavailable") -> dict[str, Any]:
    """How many GPU nodes a rollout may take down at a time, counted as the GPU Operator's upgrade controller counts
    (k8s-operator-libs pkg/upgrade: maxUnavailable scaled to the cluster's managed nodes, rounded up; the nodes already
    cordoned or not Ready take from it).

    `nodes` are the cluster's GPU Nodes, `run` the Node names of the rollout's hosts (its --limit), `batch` those of
    the batch about to start (None before the play: the batch size is then what the nodes outside the run leave).
    Returns `total`, `limit`, `unavailable` (name -> why, outside the run, or outside the batch when one is given),
    `size` (the batch size; 0 when nothing is left) and `errors` (naming the variable, empty when the batch fits)."""
    names = {str((n.get("metadata") or {}).get("name")): n for n in nodes}
    total = len(set(names) | set(run))
    text = str(max_unavailable).strip()
    limit = math.ceil(total * int(text[:-1]) / 100) if text.endswith("%") else int(text)
    outside = set(run) if batch is None else set(batch)
    reasons = {name: _unavailable(node) for name, node in sorted(names.items()) if name not in outside}
    unavailable = {name: why for name, why in reasons.items() if why}
    size = max(limit - len(unavailable), 0)
    errors = []
    # Before the play: room for a batch of one at least; a batch: room for each of its nodes (none: nothing to fit).
    if limit - len(unavailable) < (1 if batch is None else len(outside)):
        shown = ", ".join(f"{name} ({why})" for name, why in list(unavailable.items())[:10])
        more = f" and {len(unavailable) - 10} more" if len(unavailable) > 10 else ""
        errors.append(
            f"{variable}: {text} allows {limit} of the cluster's {total} GPU nodes unavailable at a time, and "
            f"{len(unavailable)} already are{' outside this batch' if batch is not None else ''}: {shown}{more}; "
            "bring them back (uncordon, Ready) or raise it")
    return {"total": total, "limit": limit, "unavailable": unavailable, "size": size, "errors": errors}

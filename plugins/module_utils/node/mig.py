# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put a node's GPUs in the MIG layout a mig-parted config names, through NVML, as nvidia-mig-parted does.

The config is the file the MIG manager reads (`version: v1`, `mig-configs: {name: [entries]}`). The plan is
pure and shared with the cluster side (_common/mig.py's `plan`): each GPU takes the first entry that selects it
(its index in `devices`, or `all`, and its model in `device-filter`), and the same checks as the cluster side's
refuse a profile the GPU does not offer, too many instances or a layout that cannot fit, before anything changes.
This module applies a plan: a GPU whose layout differs has its compute and GPU instances destroyed and created again
at placements NVML offers (a search over them, so that an order that would strand a profile is not taken), each GPU
instance with one compute instance of its whole size; a MIG mode change the driver leaves pending (the GPU held by a
process) is reported for a reset or a reboot, after which a second run creates the instances.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.mig import GpuPlan
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nvml

# The NVML session helpers of nvml.py, shared by the reader and this writer.
_call = nvml._call  # pylint: disable=protected-access
_code = nvml._code  # pylint: disable=protected-access
_profiles = nvml._profiles  # pylint: disable=protected-access
_Placement = nvml._Placement  # pylint: disable=protected-access
_NOT_SUPPORTED = nvml._NOT_SUPPORTED  # pylint: disable=protected-access
_INVALID_ARGUMENT = nvml._INVALID_ARGUMENT  # pylint: disable=protected-access
# NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE: the compute-instance profile enum by slices.
_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
_MAX_INSTANCES = 8


class _ComputeInstanceProfileInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint) for name in (
        "id", "sliceCount", "instanceCount", "multiprocessorCount", "sharedCopyEngineCount",
        "sharedDecoderCount", "sharedEncoderCount", "sharedJpegCount", "sharedOfaCount")]


def place(items: list[tuple[list[int], int]]) -> list[int] | None:
    """A start for each GPU instance (its possible starts, its size in memory slices) with none overlapping, or None.

    Largest first, then a search: NVML places what it is told, and an order such as 1g before 3g can
    leave no room for the 3g (on 7-slice GPUs a 3g fits only at 4 next to 2g + 1g + 1g).
    """
    order = sorted(range(len(items)), key=lambda i: -items[i][1])
    chosen: dict[int, int] = {}

    def free(i: int, start: int) -> bool:
        size = items[i][1]
        return all(start + size <= s or s + items[j][1] <= start for j, s in chosen.items())

    def search(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        for start in items[i][0]:
            if free(i, start):
                chosen[i] = start
                if search(k + 1):
                    return True
                del chosen[i]
        return False

    return [chosen[i] for i in range(len(items))] if search(0) else None


class Nvml:
    """The NVML calls a MIG change makes, by name, through the binding's symbol lookup (old bindings lack wrappers)."""

    def __init__(self, library: str | None) -> None:
        if not nvml.HAS_PYNVML:
            raise RuntimeError("the NVML Python binding (nvidia-ml-py, package python3-pynvml) is not installed")
        if library:
            nvml.pynvml.nvmlLib = ctypes.CDLL(library)
            getattr(nvml.pynvml, "_nvmlGetFunctionPointer_cache", {}).clear()
        nvml.pynvml.nvmlInit()

    def close(self) -> None:
        nvml.pynvml.nvmlShutdown()

    @staticmethod
    def handle(index: int) -> Any:
        return nvml.pynvml.nvmlDeviceGetHandleByIndex(index)

    @staticmethod
    def profiles(handle: object) -> dict[str, dict]:
        """The GPU's GPU-instance profiles by name: NVML id and slices."""
        memory = int(nvml.pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        return {str(p["name"]): {"id": p["id"], "slices": p["slices"]} for p in _profiles(handle, memory)}

    @staticmethod
    def set_mode(handle: object, enabled: bool) -> bool:
        """Set MIG mode; True when it took effect, False when the driver left it pending (the GPU is in use)."""
        status = ctypes.c_int()
        _call("nvmlDeviceSetMigMode", handle, ctypes.c_uint(1 if enabled else 0), ctypes.byref(status))
        return status.value == 0

    @staticmethod
    def placements(handle: object, profile_id: int) -> tuple[list[int], int]:
        array = (_Placement * _MAX_INSTANCES)()
        count = ctypes.c_uint(_MAX_INSTANCES)
        _call("nvmlDeviceGetGpuInstancePossiblePlacements_v2", handle, ctypes.c_uint(profile_id), array, ctypes.byref(count))
        found = [array[i] for i in range(count.value)]
        return [p.start for p in found], (found[0].size if found else 0)

    @staticmethod
    def destroy_all(handle: object, profile_ids: list[int]) -> int:
        """Destroy every compute instance, then every GPU instance; returns how many GPU instances went."""
        gone = 0
        for profile_id in profile_ids:
            gis = (ctypes.c_void_p * _MAX_INSTANCES)()
            count = ctypes.c_uint(_MAX_INSTANCES)
            _call("nvmlDeviceGetGpuInstances", handle, ctypes.c_uint(profile_id), gis, ctypes.byref(count))
            for g in range(count.value):
                gi = ctypes.c_void_p(gis[g])
                for ci_profile in sorted(_CI_PROFILE.values()):
                    cis = (ctypes.c_void_p * _MAX_INSTANCES)()
                    n = ctypes.c_uint(_MAX_INSTANCES)
                    try:
                        _call("nvmlGpuInstanceGetComputeInstances", gi, ctypes.c_uint(ci_profile), cis, ctypes.byref(n))
                    except nvml.pynvml.NVMLError as exc:
                        if _code(exc) in (_NOT_SUPPORTED, _INVALID_ARGUMENT):
                            continue
                        raise
                    for c in range(n.value):
                        _call("nvmlComputeInstanceDestroy", ctypes.c_void_p(cis[c]))
                _call("nvmlGpuInstanceDestroy", gi)
                gone += 1
        return gone

    @staticmethod
    def create(handle: object, profile_id: int, start: int, size: int, slices: int) -> None:
        """One GPU instance at (start, size), with one compute instance of all its slices."""
        placement = _Placement(start=start, size=size)
        gi = ctypes.c_void_p()
        _call("nvmlDeviceCreateGpuInstanceWithPlacement", handle, ctypes.c_uint(profile_id), ctypes.byref(placement), ctypes.byref(gi))
        info = _ComputeInstanceProfileInfo()
        _call("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, ctypes.c_uint(_CI_PROFILE[slices]), ctypes.c_uint(0), ctypes.byref(info))
        ci = ctypes.c_void_p()
        _call("nvmlGpuInstanceCreateComputeInstance", gi, ctypes.c_uint(info.id), ctypes.byref(ci))


def apply(plans: list[GpuPlan], library: str | None, log: Callable[[str], None]) -> list[int]:
    """Carry out the GPUs' plans in one NVML session; returns the indexes whose MIG mode change is left pending.

    Placements are worked out for every GPU already in MIG mode before the first change, so a layout NVML
    cannot place is refused with nothing changed. Raises RuntimeError naming the GPU and the call that failed.
    """
    session = Nvml(library)
    pending: list[int] = []
    try:
        handles = {p["index"]: session.handle(p["index"]) for p in plans if p["change"]}
        tables = {index: session.profiles(handle) for index, handle in handles.items()}
        layouts = {p["index"]: _layout(session, handles[p["index"]], p, tables[p["index"]])
                   for p in plans if p["change"] and p["mig_before"] and p["mig_after"]}
        for p in plans:
            if not p["change"]:
                continue
            handle, table = handles[p["index"]], tables[p["index"]]
            where = f"GPU {p['index']} ({p['bus_id']})"
            try:
                if p["mig_before"]:
                    gone = session.destroy_all(handle, sorted(v["id"] for v in table.values()))
                    log(f"{where}: destroyed {gone} GPU instance(s)")
                if p["mig_before"] != p["mig_after"] and not session.set_mode(handle, p["mig_after"]):
                    log(f"{where}: MIG mode {'enable' if p['mig_after'] else 'disable'} is pending: the GPU is in use")
                    pending.append(p["index"])
                    continue
                if p["mig_after"] and p["after"]:
                    layout = layouts.get(p["index"]) or _layout(session, handle, p, table)
                    for profile_id, start, size, slices in layout:
                        session.create(handle, profile_id, start, size, slices)
                    log(f"{where}: created {', '.join(p['after'])}")
            except nvml.pynvml.NVMLError as exc:
                raise RuntimeError(f"{where}: {exc}") from exc
    finally:
        session.close()
    return pending


def _layout(session: Nvml, handle: object, p: GpuPlan, table: dict[str, dict]) -> list[tuple[int, int, int, int]]:
    """(profile id, start, size, slices) for each wanted GPU instance, at placements NVML offers."""
    items, rows = [], []
    for name in p["after"]:
        profile = table[name]
        starts, size = session.placements(handle, profile["id"])
        items.append((starts, size))
        rows.append((profile["id"], size, profile["slices"]))
    starts_chosen = place(items)
    if starts_chosen is None:
        raise RuntimeError(f"GPU {p['index']} ({p['bus_id']}): {' + '.join(p['after'])} cannot be placed together "
                           "at the placements this GPU offers; nothing was changed on it")
    return [(pid, start, size, slices) for (pid, size, slices), start in zip(rows, starts_chosen, strict=True)]

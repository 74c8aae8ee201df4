# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the driver's view of the GPUs through NVML, with nvidia-ml-py (pynvml), in one session.

The binding loads the library; a given path is loaded instead of the default libnvidia-ml.so.1
(an image being built, the lab's simulated hardware). Old bindings (Ubuntu 22.04 ships 7.352)
lack wrappers for compute capability and MIG: those entry points are then called by name through
the binding's own symbol lookup, with the same C signatures.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import (
    FabricState,
    GpuFabric,
    MigDevice,
    MigProfile,
    NvmlFacts,
    NvmlGpu,
    NvmlStatus,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.derive import mig_profile_name

try:
    import pynvml

    HAS_PYNVML = True
except ImportError:
    pynvml = None
    HAS_PYNVML = False

DEFAULT_LIBRARY = "libnvidia-ml.so.1"
# NVML return codes the report tells apart.
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_INVALID_ARGUMENT = 2
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
# NVML_GPU_INSTANCE_PROFILE_COUNT in current headers; a driver that predates an id answers
# INVALID_ARGUMENT or NOT_SUPPORTED for it, and it is skipped.
_PROFILE_COUNT = 17
_PROFILE_INFO_V2 = 0x02000098


class _ProfileInfoV1(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint), ("isP2pSupported", ctypes.c_uint), ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint), ("multiprocessorCount", ctypes.c_uint), ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint), ("encoderCount", ctypes.c_uint), ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint), ("memorySizeMB", ctypes.c_ulonglong),
    ]


class _ProfileInfoV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), *_ProfileInfoV1._fields_, ("name", ctypes.c_char * 96)]


class _DeviceAttributes(ctypes.Structure):
    _fields_ = [
        ("multiprocessorCount", ctypes.c_uint), ("sharedCopyEngineCount", ctypes.c_uint),
        ("sharedDecoderCount", ctypes.c_uint), ("sharedEncoderCount", ctypes.c_uint), ("sharedJpegCount", ctypes.c_uint),
        ("sharedOfaCount", ctypes.c_uint), ("gpuInstanceSliceCount", ctypes.c_uint),
        ("computeInstanceSliceCount", ctypes.c_uint), ("memorySizeMB", ctypes.c_ulonglong),
    ]


class _Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class _GpuInstanceInfo(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("id", ctypes.c_uint), ("profileId", ctypes.c_uint), ("placement", _Placement)]


class _GpuFabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t (NVML 12.535 on): cluster UUID, status, clique id, state."""

    _fields_ = [("clusterUuid", ctypes.c_ubyte * 16), ("status", ctypes.c_int), ("cliqueId", ctypes.c_uint),
                ("state", ctypes.c_ubyte)]


# NVML_GPU_FABRIC_STATE_*.
_FABRIC_STATES: dict[int, FabricState] = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _code(exc: Exception) -> int | None:
    return getattr(exc, "value", None)


def normalise_bus_id(bus_id: str) -> str:
    """NVML's '00000000:04:00.0' as sysfs writes it: '0000:04:00.0'."""
    bus_id = bus_id.lower()
    domain, _sep, rest = bus_id.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else bus_id


def _call(name: str, *args: object) -> int:
    """Call an NVML entry point by name through the binding's symbol lookup; raise its error."""
    fn = pynvml._nvmlGetFunctionPointer(name)  # pylint: disable=protected-access
    ret = fn(*args)
    pynvml._nvmlCheckReturn(ret)  # pylint: disable=protected-access
    return ret


def _pair(name: str, handle: object, ctype: type[Any]) -> tuple[int, int]:
    """A device entry point with two outputs, through the binding's wrapper or, lacking one, by name."""
    if hasattr(pynvml, name):
        first, second = getattr(pynvml, name)(handle)
        return int(first), int(second)
    a, b = ctype(), ctype()
    _call(name, handle, ctypes.byref(a), ctypes.byref(b))
    return int(a.value), int(b.value)


def _has_entry_point(name: str) -> bool:
    """Whether the loaded library exports this entry point (older drivers lack the newer ones)."""
    try:
        pynvml._nvmlGetFunctionPointer(name)  # pylint: disable=protected-access
    except pynvml.NVMLError as exc:
        if _code(exc) == _FUNCTION_NOT_FOUND:
            return False
        raise
    return True


def _compute_capability(handle: object) -> str:
    major, minor = _pair("nvmlDeviceGetCudaComputeCapability", handle, ctypes.c_int)
    return f"{major}.{minor}"


def _mig_mode(handle: object) -> tuple[int, int] | None:
    """(current, pending), or None when the GPU cannot do MIG."""
    try:
        return _pair("nvmlDeviceGetMigMode", handle, ctypes.c_uint)
    except pynvml.NVMLError as exc:
        if _code(exc) in (_NOT_SUPPORTED, _INVALID_ARGUMENT):
            return None
        raise


def _profiles(handle: object, memory_bytes: int) -> list[MigProfile]:
    """The GPU-instance profiles the GPU supports, named by NVML (v2 info) or, before v2, as GFD names them."""
    profiles: list[MigProfile] = []
    # v2 carries NVML's profile name; drivers before it have only v1. One answer for every profile.
    v2 = _has_entry_point("nvmlDeviceGetGpuInstanceProfileInfoV")
    for profile in range(_PROFILE_COUNT):
        info: ctypes.Structure = _ProfileInfoV2(version=_PROFILE_INFO_V2) if v2 else _ProfileInfoV1()
        try:
            _call("nvmlDeviceGetGpuInstanceProfileInfoV" if v2 else "nvmlDeviceGetGpuInstanceProfileInfo",
                  handle, profile, ctypes.byref(info))
        except pynvml.NVMLError as exc:
            if _code(exc) in (_NOT_SUPPORTED, _INVALID_ARGUMENT):
                continue
            raise
        name = _text(info.name) if v2 else None
        if name and name.startswith("MIG "):
            name = name[4:]
        name = name or mig_profile_name(profile, info.memorySizeMB, memory_bytes)
        profiles.append({
            "profile": profile,
            "id": info.id,
            "name": name,
            "instances": info.instanceCount,
            "slices": info.sliceCount,
            "memory_mib": info.memorySizeMB,
            "multiprocessors": info.multiprocessorCount,
            "engines": {"copy": info.copyEngineCount, "decoder": info.decoderCount, "encoder": info.encoderCount,
                        "jpeg": info.jpegCount, "ofa": info.ofaCount},
        })
    return profiles


def _mig_devices(handle: object, profiles: list[MigProfile], memory_bytes: int) -> list[MigDevice]:
    """The MIG devices that exist on a GPU in MIG mode, each with the profile name GFD gives it.

    As GFD does: the GPU instance's profile id, matched against the GPU's profile table, gives the
    profile enum; the device's attributes give the memory and the compute-instance slices (which name
    the same thing as the compute-instance profile GFD looks up).
    """
    enum_by_id = {p["id"]: p["profile"] for p in profiles}
    count = ctypes.c_uint()
    _call("nvmlDeviceGetMaxMigDeviceCount", handle, ctypes.byref(count))
    devices: list[MigDevice] = []
    for index in range(count.value):
        mig = ctypes.c_void_p()
        try:
            _call("nvmlDeviceGetMigDeviceHandleByIndex", handle, index, ctypes.byref(mig))
        except pynvml.NVMLError as exc:
            if _code(exc) == _NOT_FOUND:
                continue
            raise
        uuid = ctypes.create_string_buffer(96)
        _call("nvmlDeviceGetUUID", mig, uuid, ctypes.c_uint(96))
        attrs = _DeviceAttributes()
        _call("nvmlDeviceGetAttributes_v2", mig, ctypes.byref(attrs))
        gi_id, ci_id = ctypes.c_uint(), ctypes.c_uint()
        _call("nvmlDeviceGetGpuInstanceId", mig, ctypes.byref(gi_id))
        _call("nvmlDeviceGetComputeInstanceId", mig, ctypes.byref(ci_id))
        gi, gi_info = ctypes.c_void_p(), _GpuInstanceInfo()
        _call("nvmlDeviceGetGpuInstanceById", handle, gi_id, ctypes.byref(gi))
        _call("nvmlGpuInstanceGetInfo", gi, ctypes.byref(gi_info))
        enum = enum_by_id.get(gi_info.profileId)
        devices.append({
            "index": index,
            "uuid": _text(uuid.value),
            "profile": mig_profile_name(enum, attrs.memorySizeMB, memory_bytes, attrs.computeInstanceSliceCount)
            if enum is not None else None,
            "gpu_instance_id": gi_id.value,
            "compute_instance_id": ci_id.value,
            "memory_mib": attrs.memorySizeMB,
            "multiprocessors": attrs.multiprocessorCount,
            "slices_gi": attrs.gpuInstanceSliceCount,
            "slices_ci": attrs.computeInstanceSliceCount,
            "engines": {"copy": attrs.sharedCopyEngineCount, "decoder": attrs.sharedDecoderCount,
                        "encoder": attrs.sharedEncoderCount, "jpeg": attrs.sharedJpegCount, "ofa": attrs.sharedOfaCount},
        })
    return devices


def _fabric(handle: object, supported: bool) -> GpuFabric:
    """The GPU's NVLink fabric state; not_supported where the GPU has none or the library lacks the call."""
    result: GpuFabric = {"state": "not_supported", "status": None, "clique_id": None}
    if not supported:
        return result
    info = _GpuFabricInfo()
    try:
        _call("nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info))
    except pynvml.NVMLError as exc:
        if _code(exc) in (_NOT_SUPPORTED, _INVALID_ARGUMENT):
            return result
        raise
    result["state"] = _FABRIC_STATES.get(info.state, "unknown")
    if result["state"] == "completed":
        result["status"] = "success" if info.status == 0 else _text(pynvml.nvmlErrorString(info.status))
        result["clique_id"] = int(info.cliqueId)
    return result


def _gpu(index: int, fabric_call: bool) -> NvmlGpu:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    mig = _mig_mode(handle)
    memory_bytes = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    profiles = _profiles(handle, memory_bytes) if mig is not None else []
    return {
        "index": index,
        "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
        "name": _text(pynvml.nvmlDeviceGetName(handle)),
        "bus_id": normalise_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId)),
        "memory_mib": memory_bytes // (1024 * 1024),
        "compute_capability": _compute_capability(handle),
        "persistence_mode": pynvml.nvmlDeviceGetPersistenceMode(handle) == 1,
        "mig": {
            "capable": mig is not None,
            "current": bool(mig and mig[0]),
            "pending": bool(mig and mig[1]),
            "profiles": profiles,
            # Only a GPU in MIG mode now has MIG devices.
            "devices": _mig_devices(handle, profiles, memory_bytes) if mig and mig[0] else [],
        },
        "fabric": _fabric(handle, fabric_call),
    }


def read_nvml(library: str | None = None) -> NvmlFacts:
    """One NVML session: driver and CUDA versions and every GPU; a status says why when there are none.

    status: ok, binding_missing, library_not_found, driver_not_loaded, error.
    """
    result: NvmlFacts = {
        "status": "ok",
        "error": None,
        "library": library or DEFAULT_LIBRARY,
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
        "gpus": [],
    }
    if not HAS_PYNVML:
        result["status"] = "binding_missing"
        result["error"] = "the NVML Python binding (nvidia-ml-py, package python3-pynvml) is not installed"
        return result
    if library:
        try:
            pynvml.nvmlLib = ctypes.CDLL(library)
            # Entry points the binding looked up in another library are not this one's.
            getattr(pynvml, "_nvmlGetFunctionPointer_cache", {}).clear()
        except OSError as exc:
            result["status"] = "library_not_found"
            result["error"] = f"cannot load {library}: {exc}"
            return result
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        statuses: dict[int | None, NvmlStatus] = {_LIBRARY_NOT_FOUND: "library_not_found", _DRIVER_NOT_LOADED: "driver_not_loaded"}
        result["status"] = statuses.get(_code(exc), "error")
        result["error"] = f"nvmlInit: {exc}"
        return result
    try:
        result["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        result["nvml_version"] = _text(pynvml.nvmlSystemGetNVMLVersion())
        cuda = ctypes.c_int()
        _call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(cuda))
        result["cuda_driver_version"] = f"{cuda.value // 1000}.{cuda.value % 1000 // 10}"
        fabric_call = _has_entry_point("nvmlDeviceGetGpuFabricInfo")
        result["gpus"] = [_gpu(i, fabric_call) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as exc:
        result["status"] = "error"
        result["error"] = str(exc)
    finally:
        pynvml.nvmlShutdown()
    return result

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

try:
    import pynvml

    HAS_PYNVML = True
except ImportError:
    pynvml = None
    HAS_PYNVML = False

DEFAULT_LIBRARY = "libnvidia-ml.so.1"
# NVML return codes the report tells apart.
_NOT_SUPPORTED = 3
_INVALID_ARGUMENT = 2
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_PROFILE_COUNT = 10  # NVML_GPU_INSTANCE_PROFILE_COUNT in the 535 headers; later ids answer NOT_SUPPORTED
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


def _pair(name: str, handle: object, ctype: type) -> tuple[int, int]:
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


def _profiles(handle: object) -> list[dict[str, object]]:
    """The GPU-instance profiles the GPU supports, with NVML's names (v2 info) where it has them."""
    profiles = []
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


def _gpu(index: int) -> dict[str, object]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    mig = _mig_mode(handle)
    return {
        "index": index,
        "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
        "name": _text(pynvml.nvmlDeviceGetName(handle)),
        "bus_id": normalise_bus_id(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId)),
        "memory_mib": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024),
        "compute_capability": _compute_capability(handle),
        "persistence_mode": pynvml.nvmlDeviceGetPersistenceMode(handle) == 1,
        "mig": {
            "capable": mig is not None,
            "current": bool(mig and mig[0]),
            "pending": bool(mig and mig[1]),
            "profiles": _profiles(handle) if mig is not None else [],
        },
    }


def read_nvml(library: str | None = None) -> dict[str, object]:
    """One NVML session: driver and CUDA versions and every GPU; a status says why when there are none.

    status: ok, binding_missing, library_not_found, driver_not_loaded, error.
    """
    result: dict[str, object] = {
        "status": "ok",
        "error": None,
        "library": library or DEFAULT_LIBRARY,
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
        "gpus": [],
    }
    if not HAS_PYNVML:
        result.update(status="binding_missing", error="the NVML Python binding (nvidia-ml-py, package python3-pynvml) is not installed")
        return result
    if library:
        try:
            pynvml.nvmlLib = ctypes.CDLL(library)
            # Entry points the binding looked up in another library are not this one's.
            getattr(pynvml, "_nvmlGetFunctionPointer_cache", {}).clear()
        except OSError as exc:
            result.update(status="library_not_found", error=f"cannot load {library}: {exc}")
            return result
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        code = _code(exc)
        status = {_LIBRARY_NOT_FOUND: "library_not_found", _DRIVER_NOT_LOADED: "driver_not_loaded"}.get(code, "error")
        result.update(status=status, error=f"nvmlInit: {exc}")
        return result
    try:
        result["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        result["nvml_version"] = _text(pynvml.nvmlSystemGetNVMLVersion())
        cuda = ctypes.c_int()
        _call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(cuda))
        result["cuda_driver_version"] = f"{cuda.value // 1000}.{cuda.value % 1000 // 10}"
        result["gpus"] = [_gpu(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except pynvml.NVMLError as exc:
        result.update(status="error", error=str(exc))
    finally:
        pynvml.nvmlShutdown()
    return result

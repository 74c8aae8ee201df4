"""The fake NVML's answers to what NVIDIA's own components call (k8s-device-plugin, GFD), through ctypes.

Each test loads its own copy of the library (a new path is a new dlopen), so no state leaks between tests.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from lab.sim.hardware import build_fake_nvml, c_string, gpu_uuid, load_profile, nvml_conf, write_hardware

SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, TIMEOUT, UNKNOWN = 0, 1, 2, 3, 10, 999
TOPOLOGY_INTERNAL, TOPOLOGY_NODE, TOPOLOGY_SYSTEM = 0, 40, 50
# nvmlEventType*: single-bit ECC, double-bit ECC, P-state, critical Xid, clock; 0x100 (MIG config change) is not a GPU's.
XID, DBE, SBE = 0x8, 0x2, 0x1


class EventData(ctypes.Structure):
    _fields_ = [("device", ctypes.c_void_p), ("eventType", ctypes.c_ulonglong), ("eventData", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("nvml-cache")


def load(where: Path, lib: Path, conf: str | None) -> ctypes.CDLL:
    """A copy of lib in where, with conf as its nvml.conf (none when conf is None), loaded."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy2(lib, where / "libnvidia-ml.so.1")
    if conf is not None:
        (where / "nvml.conf").write_text(conf)
    return ctypes.CDLL(str(where / "libnvidia-ml.so.1"))


def handle(nvml: ctypes.CDLL, index: int) -> ctypes.c_void_p:
    dev = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(dev)) == SUCCESS
    return dev


def count(nvml: ctypes.CDLL) -> int:
    n = ctypes.c_uint()
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) == SUCCESS
    return n.value


def uuid(nvml: ctypes.CDLL, index: int) -> str:
    buf = ctypes.create_string_buffer(96)
    assert nvml.nvmlDeviceGetUUID(handle(nvml, index), buf, 96) == SUCCESS
    return buf.value.decode()


@pytest.fixture
def hgx(tmp_path, cache):
    nvml = load(tmp_path / "nvml", build_fake_nvml(cache), nvml_conf(load_profile("hgx-h100"), "m1"))
    assert nvml.nvmlInit_v2() == SUCCESS
    return nvml


def test_only_the_last_shutdown_shuts_nvml_down(hgx):
    # A device plugin holds NVML open from its health checker and its allocator at once.
    assert hgx.nvmlInit_v2() == SUCCESS
    assert hgx.nvmlShutdown() == SUCCESS
    assert count(hgx) == 8
    assert hgx.nvmlShutdown() == SUCCESS
    n = ctypes.c_uint()
    assert hgx.nvmlDeviceGetCount_v2(ctypes.byref(n)) == UNINITIALIZED
    assert hgx.nvmlShutdown() == UNINITIALIZED


def test_events_register_and_a_wait_times_out(hgx):
    es = ctypes.c_void_p()
    assert hgx.nvmlEventSetCreate(ctypes.byref(es)) == SUCCESS
    supported = ctypes.c_ulonglong()
    dev = handle(hgx, 7)
    assert hgx.nvmlDeviceGetSupportedEventTypes(dev, ctypes.byref(supported)) == SUCCESS
    assert supported.value & (XID | DBE | SBE) == XID | DBE | SBE
    assert hgx.nvmlDeviceRegisterEvents(dev, ctypes.c_ulonglong(XID | DBE | SBE), es) == SUCCESS
    assert hgx.nvmlDeviceRegisterEvents(dev, ctypes.c_ulonglong(0x100), es) == NOT_SUPPORTED
    data = EventData()
    t0 = time.monotonic()
    assert hgx.nvmlEventSetWait_v2(es, ctypes.byref(data), 50) == TIMEOUT
    assert time.monotonic() - t0 >= 0.04  # it waits its timeout out, as the real call does with no event
    assert hgx.nvmlEventSetFree(es) == SUCCESS


def test_event_calls_refuse_what_is_not_an_event_set(hgx):
    dev = handle(hgx, 0)
    assert hgx.nvmlDeviceRegisterEvents(dev, ctypes.c_ulonglong(XID), dev) == INVALID_ARGUMENT
    assert hgx.nvmlEventSetWait_v2(dev, ctypes.byref(EventData()), 0) == INVALID_ARGUMENT
    assert hgx.nvmlEventSetFree(dev) == INVALID_ARGUMENT


def test_timeout_has_its_name(hgx):
    hgx.nvmlErrorString.restype = ctypes.c_char_p
    assert hgx.nvmlErrorString(TIMEOUT) == b"Timeout"


def test_topology_follows_the_profiles_numa_nodes(hgx):
    # hgx-h100: GPUs 0-3 on NUMA node 0, 4-7 on node 1.
    path = ctypes.c_uint(99)

    def ancestor(a: int, b: int) -> int:
        assert hgx.nvmlDeviceGetTopologyCommonAncestor(handle(hgx, a), handle(hgx, b), ctypes.byref(path)) == SUCCESS
        return path.value

    assert ancestor(0, 0) == TOPOLOGY_INTERNAL
    assert ancestor(0, 3) == TOPOLOGY_NODE
    assert ancestor(4, 7) == TOPOLOGY_NODE
    assert ancestor(3, 4) == TOPOLOGY_SYSTEM


def test_nvlink_is_not_simulated_to_nvml_callers(hgx):
    state = ctypes.c_uint(7)
    assert hgx.nvmlDeviceGetNvLinkState(handle(hgx, 0), 0, ctypes.byref(state)) == NOT_SUPPORTED
    assert hgx.nvmlDeviceGetNvLinkState(ctypes.c_void_p(), 0, ctypes.byref(state)) == INVALID_ARGUMENT


def test_a_copy_without_nvml_conf_answers_from_its_compiled_in_configuration(tmp_path, cache):
    # A container runtime injects the library file alone: its answers must come with it.
    conf = nvml_conf(load_profile("hgx-h100"), "node-1")
    alone = load(tmp_path / "container", build_fake_nvml(cache, conf), None)
    assert alone.nvmlInit_v2() == SUCCESS
    assert count(alone) == 8
    assert uuid(alone, 7) == gpu_uuid("node-1", 7)


def test_nvml_conf_beside_the_library_wins_over_the_compiled_in_one(tmp_path, cache):
    built_for = nvml_conf(load_profile("hgx-h100"), "node-1")
    nvml = load(tmp_path / "hw", build_fake_nvml(cache, built_for), nvml_conf(load_profile("v100"), "other"))
    assert nvml.nvmlInit_v2() == SUCCESS
    assert count(nvml) == len(load_profile("v100")["gpus"]["bus_ids"])


def test_without_either_configuration_init_fails(tmp_path, cache):
    nvml = load(tmp_path / "bare", build_fake_nvml(cache), None)
    assert nvml.nvmlInit_v2() == UNKNOWN


def test_each_compiled_in_configuration_is_its_own_cached_library(cache):
    plain = build_fake_nvml(cache)
    a = build_fake_nvml(cache, nvml_conf(load_profile("hgx-h100"), "a"))
    b = build_fake_nvml(cache, nvml_conf(load_profile("hgx-h100"), "b"))
    assert len({plain, a, b}) == 3
    assert build_fake_nvml(cache, nvml_conf(load_profile("hgx-h100"), "a")) == a


@pytest.mark.parametrize("text", ["", "a=1\n", 'q="x"\\y??=\n', "été\nno newline", "\t\x01\n\n"])
def test_c_string_escapes_what_c_would_read_otherwise(text, tmp_path):
    # The literal, compiled and printed back, is the text byte for byte.
    src = tmp_path / "t.c"
    src.write_text('#include <stdio.h>\nstatic const char s[] =\n' + c_string(text) + ';\nint main(void) { fwrite(s, 1, sizeof s - 1, stdout); return 0; }\n')
    exe = tmp_path / "t"
    subprocess.run(["gcc", "-Wall", "-Werror", "-o", str(exe), str(src)], check=True)
    assert subprocess.run([str(exe)], capture_output=True, check=True).stdout == text.encode()


def test_the_driver_roots_so_1_link_stays_inside_it(tmp_path, cache):
    hw = tmp_path / "hw"
    write_hardware(load_profile("hgx-h100"), hw, "m1", "6.8.0-45-generic", build_fake_nvml(cache))
    lib = hw / "driver/usr/lib/x86_64-linux-gnu"
    assert os.readlink(lib / "libnvidia-ml.so.1") == "libnvidia-ml.so.550.54.15"
    assert (lib / "libnvidia-ml.so.1").resolve() == (hw / "nvml/libnvidia-ml.so.1").resolve()


def test_the_library_names_itself_as_nvidias_does(cache):
    # ldconfig makes libnvidia-ml.so.1 from this name in a container given only the versioned file (the CDI spec's
    # update-ldcache hook); without it NVML is not found there.
    dynamic = subprocess.run(["readelf", "-d", str(build_fake_nvml(cache))], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dynamic

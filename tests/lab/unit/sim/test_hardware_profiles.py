"""Each lab hardware profile, read back by gpu_info's own code through the simulated sysfs and NVML.

This is where the labels are compared with GFD's rules by hand: product names sanitised, family from
the compute capability, counts and memory from the profile. gpu_info reports the hardware only; the labels
are computed from its structure with the cluster side's code (cluster/gfd.py), as the cluster roles do.
"""

from __future__ import annotations

import ctypes

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import facts
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.gfd import node_gfd_labels
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect

from lab.errors import LabError
from lab.sim.hardware import build_fake_nvml, load_profile, mig_layout, nvml_conf, profile_names, write_hardware


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory):
    return build_fake_nvml(tmp_path_factory.mktemp("nvml-cache"))


def read(profile: str, tmp_path, fake_nvml):
    hw = tmp_path / "hw"
    write_hardware(load_profile(profile), hw, "m1", "6.8.0-45-generic", fake_nvml)
    lib = hw / "nvml/libnvidia-ml.so.1"
    return collect(str(hw), str(lib) if lib.exists() else None)


def labels_of(info, sharing=None, mig="none") -> dict[str, str]:
    """GFD's labels for the node, computed from its gpu_info on the cluster side."""
    return node_gfd_labels(info, sharing, mig)[0]


EXPECTED = {
    # profile: (gpus, nvswitches, nics, architectures, module type, fabric mode, nvml status, nouveau, secure boot)
    "hgx-h100": (8, 4, 8, ["hopper"], "open", "fabricmanager", "ok", False, "disabled"),
    "a100-pcie-mig": (2, 0, 0, ["ampere"], "open", "none", "ok", False, "disabled"),
    "l40s": (4, 0, 0, ["ada-lovelace"], "open", "none", "driver_not_loaded", True, "disabled"),
    "hgx-b200": (8, 0, 10, ["blackwell"], "open", "nvlsm", "ok", False, "disabled"),
    "gb200-tray": (4, 0, 4, ["blackwell"], "open", "imex", "ok", False, "disabled"),
    "gh200": (1, 0, 1, ["hopper"], "open", "none", "ok", False, "enabled"),
    "v100": (4, 0, 0, ["volta"], "proprietary", "none", "ok", False, "disabled"),
    "t4": (4, 0, 0, ["turing"], "open", "none", "ok", False, "disabled"),
    "no-gpu": (0, 0, 0, [], None, "none", "library_not_found", False, "not_efi"),
}


def test_every_profile_has_an_expectation():
    assert sorted(EXPECTED) == profile_names()


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_profile_reads_back(profile, tmp_path, fake_nvml, monkeypatch):
    if profile == "no-gpu":
        # No NVIDIA library anywhere: make the default name unloadable, as on a machine without one.
        monkeypatch.setattr("ansible_collections.gpuops.nvidia.plugins.module_utils.node.nvml.DEFAULT_LIBRARY", "libnvidia-ml-absent.so.1")
        import pynvml

        monkeypatch.setattr(pynvml, "nvmlLib", None)
        monkeypatch.setattr(pynvml, "CDLL", _refuse)
    gpus, switches, nics, archs, module_type, fm, status, nouveau, secure_boot = EXPECTED[profile]
    info = read(profile, tmp_path, fake_nvml)
    assert info["summary"]["gpu_count"] == gpus
    assert info["summary"]["nvswitch_count"] == switches
    assert info["summary"]["network_count"] == nics
    assert info["summary"]["architectures"] == archs
    assert info["derived"]["kernel_module_type"]["type"] == module_type
    assert info["derived"]["fabric_manager"]["mode"] == fm
    assert info["derived"]["fabric_manager"]["required"] is (fm in ("fabricmanager", "nvlsm"))
    assert info["nvml"]["status"] == status, info["nvml"]["error"]
    assert info["node"]["modules"]["nouveau"] is nouveau
    assert info["node"]["secure_boot"] == secure_boot
    assert info["node"]["kernel"]["running"] == "6.8.0-45-generic"
    assert info["schema_version"] == facts.SCHEMA_VERSION == 7
    assert set(info["derived"]) == {"kernel_module_type", "fabric_manager"}  # hardware only: no labels
    if status == "ok":
        assert [g["bus_id"] for g in info["nvml"]["gpus"]] == [g["bus_id"] for g in info["pci"]["gpus"]]
        assert len({g["uuid"] for g in info["nvml"]["gpus"]}) == gpus


def _refuse(*_args, **_kwargs):
    raise OSError("libnvidia-ml.so.1: cannot open shared object file")


def test_hgx_h100_mig_profiles_from_nvml(tmp_path, fake_nvml):
    gpu = read("hgx-h100", tmp_path, fake_nvml)["nvml"]["gpus"][0]
    names = [p["name"] for p in gpu["mig"]["profiles"]]
    assert names == ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"]
    assert gpu["mig"]["profiles"][0]["instances"] == 7
    assert gpu["bus_id"] == "0000:18:00.0"
    assert gpu["persistence_mode"] is True


def test_a100_mig_mode_per_gpu(tmp_path, fake_nvml):
    gpus = read("a100-pcie-mig", tmp_path, fake_nvml)["nvml"]["gpus"]
    assert [(g["mig"]["capable"], g["mig"]["current"]) for g in gpus] == [(True, True), (True, False)]


def test_l40s_without_driver_labels_from_the_pci_table(tmp_path, fake_nvml):
    info = read("l40s", tmp_path, fake_nvml)
    labels, source = node_gfd_labels(info)
    assert source == "pci"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    assert labels["nvidia.com/gpu.family"] == "ada-lovelace"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert "nvidia.com/gpu.memory" not in labels  # unknown until the driver answers
    assert [g["driver"] for g in info["pci"]["gpus"]] == ["nouveau"] * 4


def test_v100_labels_and_time_slicing(tmp_path, fake_nvml):
    labels = labels_of(read("v100", tmp_path, fake_nvml), sharing={"strategy": "time-slicing", "replicas": 4})
    assert labels["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-16GB-SHARED"
    assert labels["nvidia.com/gpu.family"] == "volta"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/mig.capable"] == "false"


def test_b200_nvlink5_from_the_bridges_vpd(tmp_path, fake_nvml):
    info = read("hgx-b200", tmp_path, fake_nvml)
    fm = info["derived"]["fabric_manager"]
    assert fm["nvlink5"] is True and "SW_MNG in the VPD of 0000:8a:00.0, 0000:8a:00.1" in fm["reason"]
    assert [n["bus_id"] for n in info["pci"]["network"] if n["switch_managed"]] == ["0000:8a:00.0", "0000:8a:00.1"]


# profile: NVML fabric state of every GPU as the profile plants it (no fabric: not_supported).
FABRIC = {"hgx-h100": ("not_started", None), "hgx-b200": ("not_started", None), "gb200-tray": ("completed", "success"),
          "a100-pcie-mig": ("not_supported", None), "v100": ("not_supported", None), "gh200": ("not_supported", None)}


@pytest.mark.parametrize("profile", sorted(FABRIC))
def test_fabric_state_per_profile(profile, tmp_path, fake_nvml):
    gpus = read(profile, tmp_path, fake_nvml)["nvml"]["gpus"]
    assert {(g["fabric"]["state"], g["fabric"]["status"]) for g in gpus} == {FABRIC[profile]}


@pytest.mark.parametrize("planted, want", [
    ("in_progress", ("in_progress", None, None)),
    ("completed", ("completed", "success", 1)),
    ("failed", ("completed", "Unknown Error", 1)),
])
def test_fabric_states_the_lab_can_plant(planted, want, tmp_path, fake_nvml):
    profile = {**load_profile("hgx-h100"), "fabric": planted}
    write_hardware(profile, tmp_path / "hw", "m1", "6.8.0-45-generic", fake_nvml)
    info = collect(str(tmp_path / "hw"), str(tmp_path / "hw/nvml/libnvidia-ml.so.1"))
    assert {(g["fabric"]["state"], g["fabric"]["status"], g["fabric"]["clique_id"]) for g in info["nvml"]["gpus"]} == {want}


def test_an_unknown_fabric_state_is_refused(tmp_path, monkeypatch):
    (tmp_path / "x.yml").write_text("description: x\nfabric: done\n")
    monkeypatch.setattr("lab.sim.hardware.PROFILE_DIR", tmp_path)
    with pytest.raises(LabError, match="fabric 'done' is not one of not_started, in_progress, completed, failed"):
        load_profile("x")


def test_gh200_reads_a_non_zero_pci_domain(tmp_path, fake_nvml):
    info = read("gh200", tmp_path, fake_nvml)
    assert info["pci"]["gpus"][0]["bus_id"] == "0009:01:00.0"
    assert info["nvml"]["gpus"][0]["bus_id"] == "0009:01:00.0"
    assert labels_of(info)["nvidia.com/gpu.product"] == "NVIDIA-GH200-480GB"


def test_nvml_conf_bus_ids_are_nvml_formatted():
    conf = nvml_conf(load_profile("gh200"), "m1")
    assert "|00000009:01:00.0|" in conf


def test_unknown_profile_is_named():
    with pytest.raises(LabError, match=r"unknown hardware profile 'dgx-z' \(known: a100-pcie-mig, gb200-tray, gh200"):
        load_profile("dgx-z")


@pytest.mark.parametrize(
    ("root", "message"),
    [("/nonexistent-root", "root '/nonexistent-root' is not a directory"), ("/proc/self", "has no sys/ directory")],
)
def test_bad_root_is_named(root, message):
    with pytest.raises(ValueError, match=message):
        collect(root, None)


def test_an_eight_gpu_node_reads_in_well_under_a_second(tmp_path, fake_nvml):
    import time

    hw = tmp_path / "hw"
    write_hardware(load_profile("hgx-h100"), hw, "m1", "6.8.0-45-generic", fake_nvml)
    start = time.perf_counter()
    collect(str(hw), str(hw / "nvml/libnvidia-ml.so.1"))
    assert time.perf_counter() - start < 0.5


def _versions(driver: str, cuda: str) -> dict[str, str]:
    major, minor, *rest = driver.split(".")
    cmajor, cminor = cuda.split(".")
    rev = rest[0] if rest else ""
    return {
        "nvidia.com/cuda.driver-version.major": major, "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev, "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor, "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime-version.major": cmajor, "nvidia.com/cuda.runtime-version.minor": cminor,
        "nvidia.com/cuda.runtime-version.full": cuda, "nvidia.com/cuda.runtime.major": cmajor, "nvidia.com/cuda.runtime.minor": cminor,
    }


def _gpu(product, count, memory, family, major, minor, mig_capable, mode="compute"):
    labels = {
        "nvidia.com/gpu.mode": mode, "nvidia.com/mig.capable": mig_capable, "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.product": product, "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.count": count, "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": major, "nvidia.com/gpu.compute.minor": minor,
    }
    if memory:
        labels["nvidia.com/gpu.memory"] = memory
    return labels


# Written out by hand from GFD's rules (product: drop characters outside [A-Za-z0-9-_. ], spaces to '-';
# family from the compute capability; memory in MiB from NVML, absent before the driver answers).
PROFILE_LABELS = {
    "hgx-h100": {**_versions("550.54.15", "12.4"), **_gpu("NVIDIA-H100-80GB-HBM3", "8", "81559", "hopper", "9", "0", "true")},
    "a100-pcie-mig": {**_versions("535.183.01", "12.2"), **_gpu("NVIDIA-A100-80GB-PCIe", "2", "81920", "ampere", "8", "0", "true")},
    "hgx-b200": {**_versions("570.133.20", "12.8"), **_gpu("NVIDIA-B200", "8", "183359", "blackwell", "10", "0", "true")},
    "gb200-tray": {**_versions("580.178.04", "13.0"), **_gpu("NVIDIA-GB200", "4", "189471", "blackwell", "10", "0", "true")},
    "gh200": {**_versions("560.35.03", "12.6"), **_gpu("NVIDIA-GH200-480GB", "1", "97871", "hopper", "9", "0", "true")},
    "v100": {**_versions("535.183.01", "12.2"), **_gpu("Tesla-V100-SXM2-16GB", "4", "16384", "volta", "7", "0", "false")},
    "t4": {**_versions("535.183.01", "12.2"), **_gpu("Tesla-T4", "4", "15360", "turing", "7", "5", "false")},
    # No driver: the collection's device table names the part; no version or memory labels, and MIG
    # capability is unknown until NVML answers.
    "l40s": {**_gpu("NVIDIA-L40S", "4", None, "ada-lovelace", "8", "9", "false")},
    "no-gpu": {},
}


@pytest.mark.parametrize("profile", sorted(PROFILE_LABELS))
def test_each_profiles_label_set(profile, tmp_path, fake_nvml):
    assert sorted(PROFILE_LABELS) == profile_names()
    assert labels_of(read(profile, tmp_path, fake_nvml)) == PROFILE_LABELS[profile]


@pytest.mark.parametrize("profile", ["hgx-h100", "a100-pcie-mig"])
def test_a_driver_without_the_v2_profile_call_reads_profiles_through_v1(profile, tmp_path, fake_nvml, monkeypatch):
    """Before v2 NVML gave no profile names: they are computed as GFD computes them, and match NVML's."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nvml

    v2 = read(profile, tmp_path / "v2", fake_nvml)["nvml"]["gpus"][0]["mig"]["profiles"]
    monkeypatch.setattr(nvml, "_has_entry_point", lambda name: name != "nvmlDeviceGetGpuInstanceProfileInfoV")
    v1 = read(profile, tmp_path / "v1", fake_nvml)["nvml"]["gpus"][0]["mig"]["profiles"]
    assert v2 and all(p["name"] for p in v2)
    assert v1 == v2


# GPU 1 is not in MIG mode, so the full-GPU labels keep their sharing values (replicas 1, not 0).
A100_MIG = {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe", "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/mig.strategy": "mixed"}


def _mig_labels(profile, count, memory, sms, slices_gi, slices_ci, copy, decoder, jpeg=0, ofa=0, prefix=None):
    prefix = prefix or f"nvidia.com/mig-{profile}"
    return {
        f"{prefix}.product": f"NVIDIA-A100-80GB-PCIe-MIG-{profile.replace('+', '.')}", f"{prefix}.replicas": "1",
        f"{prefix}.sharing-strategy": "none", f"{prefix}.count": str(count), f"{prefix}.memory": str(memory),
        f"{prefix}.multiprocessors": str(sms), f"{prefix}.slices.gi": str(slices_gi), f"{prefix}.slices.ci": str(slices_ci),
        f"{prefix}.engines.copy": str(copy), f"{prefix}.engines.decoder": str(decoder), f"{prefix}.engines.encoder": "0",
        f"{prefix}.engines.jpeg": str(jpeg), f"{prefix}.engines.ofa": str(ofa),
    }


def test_a100_mig_devices_are_enumerated_from_nvml(tmp_path, fake_nvml):
    gpus = read("a100-pcie-mig", tmp_path, fake_nvml)["nvml"]["gpus"]
    devices = gpus[0]["mig"]["devices"]
    assert [(d["index"], d["profile"], d["memory_mib"], d["slices_gi"]) for d in devices] == [
        (0, "3g.40gb", 40192, 3), (1, "2g.20gb", 19968, 2), (2, "1g.10gb", 9728, 1), (3, "1g.10gb", 9728, 1),
    ]
    assert [d["gpu_instance_id"] for d in devices] == [1, 2, 3, 4]
    assert all(d["uuid"].startswith("MIG-") for d in devices)
    assert len({d["uuid"] for d in devices} | {g["uuid"] for g in gpus}) == 6
    assert gpus[1]["mig"]["devices"] == []  # MIG capable, not in MIG mode


def test_a100_mixed_strategy_labels_each_mig_profile(tmp_path, fake_nvml):
    labels = labels_of(read("a100-pcie-mig", tmp_path, fake_nvml), mig="mixed")
    mig = {k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-")}
    assert mig == {
        **_mig_labels("3g.40gb", 1, 40192, 42, 3, 3, 3, 2),
        **_mig_labels("2g.20gb", 1, 19968, 28, 2, 2, 2, 1),
        **_mig_labels("1g.10gb", 2, 9728, 14, 1, 1, 1, 0),
    }
    assert {k: labels[k] for k in A100_MIG} == A100_MIG


def test_a100_single_strategy_with_a_gpu_out_of_mig_mode_is_invalid(tmp_path, fake_nvml):
    labels = labels_of(read("a100-pcie-mig", tmp_path, fake_nvml), mig="single")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-80GB-PCIe-MIG-INVALID"
    assert labels["nvidia.com/gpu.count"] == "0"


def _a100(tmp_path, fake_nvml, devices):
    profile = load_profile("a100-pcie-mig")
    profile["gpus"].update(mig_enabled=[True, True], mig_devices=devices)
    hw = tmp_path / "hw"
    write_hardware(profile, hw, "m1", "6.8.0-45-generic", fake_nvml)
    return collect(str(hw), str(hw / "nvml/libnvidia-ml.so.1"))


def test_a100_single_strategy_labels_the_gpus_as_their_mig_devices(tmp_path, fake_nvml):
    labels = labels_of(_a100(tmp_path, fake_nvml, [["1g.10gb"] * 7, ["1g.10gb"] * 7]), mig="single")
    expected = _mig_labels("1g.10gb", 14, 9728, 14, 1, 1, 1, 0, prefix="nvidia.com/gpu")
    assert {k: labels[k] for k in expected} == expected
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert not any(k.startswith("nvidia.com/mig-") for k in labels)


def test_a_compute_instance_smaller_than_its_gpu_instance_is_named_for_both(tmp_path, fake_nvml):
    info = _a100(tmp_path, fake_nvml, [["1c.3g.40gb", "1g.10gb+me"], []])
    devices = info["nvml"]["gpus"][0]["mig"]["devices"]
    assert [(d["profile"], d["multiprocessors"], d["slices_ci"]) for d in devices] == [
        ("1c.3g.40gb", 14, 1), ("1g.10gb+me", 14, 1),
    ]
    labels = labels_of(info, mig="mixed")
    assert labels["nvidia.com/mig-1c.3g.40gb.product"] == "NVIDIA-A100-80GB-PCIe-MIG-1c.3g.40gb"
    assert labels["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-A100-80GB-PCIe-MIG-1g.10gb.me"


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ([["5g.50gb"], []], r"'5g.50gb' is not one of this GPU's MIG profiles \(1g.10gb, 1g.10gb\+me"),
        ([[], ["1g.10gb"]], r"mig_devices\[1\]: GPU 1 does not have MIG enabled"),
        ([["4g.40gb", "4g.40gb"], []], "more than 1 instances of 4g.40gb"),
        ([["4g.40gb", "3g.40gb", "1g.10gb"], []], "do not fit the GPU's slices together"),
        ([["3g.40gb", "3g.40gb", "1g.10gb"], []], "do not fit the GPU's slices together"),
        ([["4c.3g.40gb"], []], "compute instance larger than its GPU instance"),
    ],
)
def test_impossible_mig_layouts_are_named(devices, message):
    profile = load_profile("a100-pcie-mig")
    profile["gpus"]["mig_devices"] = devices
    with pytest.raises(LabError, match=message):
        mig_layout(profile["gpus"], "a100-pcie-mig")


@pytest.mark.parametrize(("entry", "size"), [("nvmlDeviceGetPciInfo", 52), ("nvmlDeviceGetPciInfo_v2", 52), ("nvmlDeviceGetPciInfo_v3", 68)])
def test_pci_info_writes_only_the_struct_its_entry_point_has(tmp_path, fake_nvml, entry, size):
    # Bindings as old as Ubuntu 22.04's (pynvml 7.352) pass the 52-byte struct of the v1/v2 calls; a
    # fake that writes the v3 layout there corrupts their heap.
    write_hardware(load_profile("v100"), tmp_path, "m", "6.8.0-1-generic", fake_nvml)
    lib = ctypes.CDLL(str(tmp_path / "nvml/libnvidia-ml.so.1"))
    assert lib.nvmlInit_v2() == 0
    handle = ctypes.c_void_p()
    assert lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(0), ctypes.byref(handle)) == 0
    buf = (ctypes.c_ubyte * (size + 32))(*([0xAA] * (size + 32)))
    assert getattr(lib, entry)(handle, buf) == 0
    assert bytes(buf[size:]) == b"\xaa" * 32
    assert bytes(buf[:12]) == b"0000:1a:00.0"
    assert int.from_bytes(bytes(buf[16 + 12:16 + 16]), "little") == 0x1DB110DE

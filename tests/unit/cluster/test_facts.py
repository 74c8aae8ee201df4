"""The cluster side's projection of gpu_info (_common/slim.py): what it keeps of each node's facts, and what is read from it
(the MIG models, _common/mig.py, are read from it on both sides).

The hand-written facts here are in the projection's shape, for real hardware (A100 80GB PCIe with MIG, L40S), with
the NVML profile table the driver reports for the A100; the rules' tests (test_rules.py) use them too.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import mig
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import slim as cluster
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import rules
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.rules import advertised, node_labels

from lab.sim.hardware import profile_names

A100_PROFILES = (
    ("1g.10gb", 7, 1, 9728), ("2g.20gb", 3, 2, 19968), ("3g.40gb", 2, 3, 40192), ("4g.40gb", 1, 4, 40192),
    ("7g.80gb", 1, 7, 80896), ("1g.10gb+me", 1, 1, 9728), ("1g.20gb", 4, 1, 19968),
)
A30_PROFILES = (("1g.6gb", 4, 1, 5836), ("1g.6gb+me", 1, 1, 5836), ("2g.12gb", 2, 2, 11672), ("4g.24gb", 1, 4, 23344))


def gpu(index, bus, mig_current=False, devices=(), profiles=A100_PROFILES, name="NVIDIA A100 80GB PCIe"):
    return {"index": index, "bus_id": bus, "name": name,
            "mig": {"capable": bool(profiles), "current": mig_current,
                    "profiles": [{"name": n, "instances": m, "slices": s, "memory_mib": mem} for n, m, s, mem in profiles],
                    "devices": [{"profile": p} for p in devices]}}


def info(device_id, gpus, mig=True):
    return {"summary": {"gpu_count": len(gpus), "mig_capable": mig},
            "pci": {"gpus": [{"bus_id": g["bus_id"], "device_id": device_id} for g in gpus]},
            "nvml": {"gpus": gpus}}


A100 = info("20b5", [gpu(0, "a", True, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]), gpu(1, "b")])
L40S = info("26b9", [gpu(i, str(i), profiles=(), name="NVIDIA L40S") for i in range(4)], mig=False)
CPU = {"summary": {"gpu_count": 0, "mig_capable": None}, "pci": {"gpus": []}, "nvml": {"gpus": []}}


def test_models_come_from_nvml_with_their_memory_span():
    models = mig.gpu_models(A100)
    assert list(models) == ["0x20B510DE"]
    table = models["0x20B510DE"]["profiles"]
    assert {n: (p["max"], p["size"]) for n, p in table.items()} == {
        "1g.10gb": (7, 1), "2g.20gb": (3, 2), "3g.40gb": (2, 4), "4g.40gb": (1, 4), "7g.80gb": (1, 8),
        "1g.10gb+me": (1, 1), "1g.20gb": (4, 2)}


def test_models_leave_out_gpus_that_cannot_do_mig_and_profiles_without_a_name():
    assert mig.gpu_models(L40S) == {}
    unnamed = info("20b5", [gpu(0, "a")])
    unnamed["nvml"]["gpus"][0]["mig"]["profiles"][0]["name"] = None
    assert "1g.10gb" not in mig.gpu_models(unnamed)["0x20B510DE"]["profiles"]
    assert len(mig.gpu_models(unnamed)["0x20B510DE"]["profiles"]) == len(A100_PROFILES) - 1


def test_counts_and_mig_capability():
    assert [cluster.gpu_count(i) for i in (A100, L40S, CPU)] == [2, 4, 0]
    assert [cluster.mig_capable(i) for i in (A100, L40S, CPU)] == [True, False, False]
    assert [g["bus_id"] for g in cluster.nvml_gpus(A100)] == ["a", "b"]


def test_filter_id_is_mig_parteds_device_filter():
    assert mig.filter_id("20b5") == "0x20B510DE"


@pytest.mark.parametrize("profile", profile_names())
def test_the_projection_of_every_lab_profile_has_the_declared_shape(profile, info_of, schema_errors):
    info = info_of(profile)
    slim = cluster.slim(info)
    assert schema_errors(slim, cluster.SlimFacts) == []
    assert slim["summary"] == {"gpu_count": info["summary"]["gpu_count"], "mig_capable": info["summary"]["mig_capable"]}
    assert [g["bus_id"] for g in slim["nvml"]["gpus"]] == [g["bus_id"] for g in info["nvml"]["gpus"]]


def test_the_projection_keeps_one_profile_table_per_model(info_of):
    info = info_of("hgx-h100")
    slim = cluster.slim(info)
    tables = [g["mig"]["profiles"] for g in slim["nvml"]["gpus"]]
    assert tables[0] == [{k: p[k] for k in ("name", "instances", "slices", "memory_mib")}
                         for p in info["nvml"]["gpus"][0]["mig"]["profiles"]]
    assert tables[1:] == [[]] * 7
    assert mig.gpu_models(slim) == mig.gpu_models(cluster.slim(info))
    assert list(mig.gpu_models(slim)) == ["0x233010DE"]


def test_the_rules_read_the_projection_of_real_facts(info_of):
    a100 = cluster.slim(info_of("a100-pcie-mig"))
    assert [d["profile"] for d in a100["nvml"]["gpus"][0]["mig"]["devices"]] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert advertised(a100, "mixed") == {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1,
                                         "nvidia.com/mig-1g.10gb": 2}
    assert node_labels(cluster.slim(info_of("no-gpu")), ["device-plugin"]) == {"nvidia.com/gpu.present": "false"}
    l40s = cluster.slim(info_of("l40s"))  # no driver: NVML lists no GPU, the PCI bus counts four
    assert cluster.gpu_count(l40s) == 4 and cluster.nvml_gpus(l40s) == [] and not cluster.mig_capable(l40s)


def test_the_run_hosts_are_the_group_s_within_the_limit_in_the_group_s_order():
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import cluster_run_hosts

    group = ["gpu-03", "gpu-01", "gpu-02"]
    assert rules.run_hosts(group, None) == group
    # --limit names hosts of other groups too, and in its own order: the group's hosts it names, in the group's order.
    assert cluster_run_hosts(group, ["cpu-01", "gpu-02", "gpu-03"]) == ["gpu-03", "gpu-02"]
    assert cluster_run_hosts(group, []) == []
    assert cluster_run_hosts([], None) == []

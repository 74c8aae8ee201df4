"""The mig_reconfigure_plan filter: what the cluster path of mig_reconfigure checks before it changes a Node."""

from __future__ import annotations

import yaml
from ansible_collections.gpuops.nvidia.plugins.filter.cluster import mig_reconfigure_plan

from lab.facts import A100_PROFILE_MIG_CONFIG

PARTED = {"version": "v1", "mig-configs": {
    **A100_PROFILE_MIG_CONFIG,
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 8}}],
}}
CONFIGMAP = {"data": {"config.yaml": yaml.safe_dump(PARTED)}}


def node(config: str | None = "lab-a100-gpu0-balanced", state: str | None = "success", deploy: str | None = "true") -> dict:
    labels = {"nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state, "nvidia.com/gpu.deploy.mig-manager": deploy}
    return {"metadata": {"name": "a100", "labels": {k: v for k, v in labels.items() if v is not None}}}


def plan(info_of, name: str, n: dict | None = None, cm: dict | None = None, profile: str = "a100-pcie-mig") -> dict:
    return mig_reconfigure_plan(info_of(profile), node() if n is None else n, CONFIGMAP if cm is None else cm, name, "a100", "gpu-operator")


def test_a_change_is_planned_per_gpu_from_the_facts(info_of):
    out = plan(info_of, "all-1g.10gb")
    assert out["errors"] == [] and out["skip"] == "" and not out["done"]
    assert (out["current"], out["state"]) == ("lab-a100-gpu0-balanced", "success")
    assert out["summary"] == "GPU 0 2x1g.10gb+1x2g.20gb+1x3g.40gb -> 7x1g.10gb, GPU 1 MIG off -> 7x1g.10gb"
    assert out["entries"] == PARTED["mig-configs"]["all-1g.10gb"]


def test_a_node_in_the_config_with_success_is_done_and_a_failed_one_is_not(info_of):
    assert plan(info_of, "lab-a100-gpu0-balanced")["done"]
    assert plan(info_of, "lab-a100-gpu0-balanced")["summary"] == "GPU 0 unchanged, GPU 1 unchanged"
    assert not plan(info_of, "lab-a100-gpu0-balanced", node(state="failed"))["done"]


def test_what_would_fail_is_named_before_anything_changes(info_of):
    assert plan(info_of, "all-1g.10gb", n={})["errors"] == ["no Node a100 in the cluster (gpuops_cluster_node_name names another)"]
    no_manager = plan(info_of, "all-1g.10gb", node(deploy="false"))["errors"]
    assert no_manager == ["no MIG manager runs on Node a100 (nvidia.com/gpu.deploy.mig-manager=false): deploy it with "
                          "playbooks/cluster.yml (the mig_manager role), or set gpuops_mig_reconfigure_path: host"]
    assert "ConfigMap gpu-operator/default-mig-parted-config is missing" in plan(info_of, "all-1g.10gb", cm={})["errors"][0]
    unknown = plan(info_of, "all-3g.40gb")["errors"]
    assert unknown == ["gpuops_mig_reconfigure_config: 'all-3g.40gb' is not a config of the MIG manager (ConfigMap "
                       "gpu-operator/default-mig-parted-config has all-1g.10gb, all-disabled, lab-a100-gpu0-balanced, too-big); "
                       "add it to gpuops_mig_manager_configs and run playbooks/cluster.yml"]
    assert "8 x 1g.10gb (at most 7)" in " ".join(plan(info_of, "too-big")["errors"])


def test_a_node_without_mig_is_left_alone(info_of):
    out = plan(info_of, "all-1g.10gb", node(config=None, state=None, deploy=None), profile="l40s")
    assert out["errors"] == [] and out["skip"] == "no GPU here can do MIG (NVIDIA L40S); left alone"

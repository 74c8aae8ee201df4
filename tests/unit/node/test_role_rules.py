"""The host roles' decisions on the controller (module_utils/node/role_rules.py), on what the nodes print."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.filter import node_roles

# `ctr plugins ls` as containerd 1.7 and 2.2 print it (columns aligned with spaces).
CTR_17 = """TYPE                                   ID                       PLATFORMS      STATUS
io.containerd.content.v1               content                  -              ok
io.containerd.grpc.v1                  cri                      linux/amd64    {status}
io.containerd.grpc.v1                  criu                     -              ok
io.containerd.tracing.processor.v1     otlp                     -              skip"""
CTR_22 = """TYPE                                      ID                       PLATFORMS      STATUS
io.containerd.cri.v1                      images                   -              ok
io.containerd.cri.v1                      runtime                  linux/amd64    {status}
io.containerd.grpc.v1                     cri                      -              ok"""
CRIO_LOG = [
    'time="2026-12-05T10:00:01Z" level=info msg="Starting CRI-O, version: 1.33.1"',
    'time="2026-12-05T10:00:01Z" level=warning msg="Runtime handler \\"nvidia\\" is being ignored due to: '
    'invalid runtime_path for runtime \'nvidia\': stat /usr/bin/nvidia-container-runtime: no such file or directory"',
]


@pytest.mark.parametrize("listing", [CTR_17, CTR_22])
def test_containerd_took_its_config_where_its_cri_plugin_is_ok(listing):
    assert node_roles.runtime_load_errors(listing.format(status="ok").splitlines(), "containerd", "nvidia") == []
    errors = node_roles.runtime_load_errors(listing.format(status="error").splitlines(), "containerd", "nvidia")
    assert len(errors) == 1 and errors[0].split()[-1] == "error", "only the CRI plugin's line, not criu's or another ok one"


def test_crio_did_not_take_its_config_where_its_log_says_the_handler_is_ignored():
    assert node_roles.runtime_load_errors(CRIO_LOG, "crio", "nvidia") == [CRIO_LOG[1]]
    assert node_roles.runtime_load_errors(CRIO_LOG, "crio", "nvidia-cdi") == [], "another handler's name"
    assert node_roles.runtime_load_errors(CRIO_LOG[:1], "crio", "nvidia") == []
    assert node_roles.runtime_load_errors(None, "crio", "nvidia") == []


def gpu(state, status=None):
    return {"index": 0, "fabric": {"state": state, "status": status, "clique_id": None}}


@pytest.mark.parametrize(("gpus", "active", "problems"), [
    ([gpu("completed", "success"), gpu("not_supported")], "active", []),
    ([gpu("completed", "success")], "failed", ["nvidia-fabricmanager.service is failed"]),
    ([gpu("in_progress"), gpu("in_progress"), gpu("not_started")], "active", ["a GPU is still in_progress", "a GPU is still not_started"]),
    ([gpu("completed", "NVML_ERROR_INSUFFICIENT_RESOURCES"), gpu("completed", "NVML_ERROR_INSUFFICIENT_RESOURCES")], "activating",
     ["nvidia-fabricmanager.service is activating", "a GPU failed to join: NVML_ERROR_INSUFFICIENT_RESOURCES"]),
    ([], "active", []),
])
def test_what_keeps_the_fabric_down_is_each_said_once(gpus, active, problems):
    assert node_roles.fabric_problems(gpus, active, "nvidia-fabricmanager.service") == problems


PLAN = {"changed": False, "plan": {"install": [], "repository": "distro", "method": "dkms"}}


@pytest.mark.parametrize(("plan", "installed", "hold", "changes"), [
    (PLAN, {"not_held": []}, True, False),
    ({**PLAN, "changed": True}, {"not_held": []}, True, True),
    ({"plan": PLAN["plan"]}, {"not_held": []}, True, True),  # unknown: a result without `changed`
    ({**PLAN, "plan": {**PLAN["plan"], "install": ["nvidia-driver-580-open"]}}, {}, True, True),
    ({**PLAN, "plan": {**PLAN["plan"], "repository": "cuda"}}, {}, True, True),
    ({**PLAN, "plan": {**PLAN["plan"], "method": "containerized"}}, {}, True, True),
    (PLAN, {"not_held": ["nvidia-utils-580"]}, True, True),
    (PLAN, {"not_held": ["nvidia-utils-580"]}, False, False),
    (PLAN, {}, True, False),
    (None, {}, True, True),
])
def test_the_driver_role_changed_the_node_where_its_plan_did_anything_or_may_have(plan, installed, hold, changes):
    assert node_roles.driver_changes(plan, installed, hold) is changes

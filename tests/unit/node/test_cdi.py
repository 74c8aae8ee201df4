"""CDI spec checks and the names gpu_info expects, against a spec nvidia-ctk 1.18.2 generated in the lab."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import cdi

# `nvidia-ctk cdi generate` (1.18.2, built by the lab) on a lab machine with four simulated L40S.
SPEC = yaml.safe_load((Path(__file__).parent / "recorded/nvidia-ctk-1.18.2-cdi-l40s.yaml").read_text())
UUIDS = ["GPU-63d77e99-612d-513c-a470-11229cab1ea2", "GPU-1d29a310-d579-5534-9ae4-86788ffdd627",
         "GPU-ed3817d9-b1dc-5ade-9fc2-357fd27bcca3", "GPU-39a358b9-2b7a-5927-8328-4602dce6e1d6"]


def gpu_info(migs: dict[int, list[str]] | None = None) -> dict:
    gpus = []
    for i, uuid in enumerate(UUIDS):
        devices = [{"index": j, "uuid": u} for j, u in enumerate((migs or {}).get(i, []))]
        gpus.append({"index": i, "uuid": uuid, "mig": {"capable": bool(devices), "current": bool(devices), "devices": devices}})
    return {"nvml": {"status": "ok", "gpus": gpus}}


def test_the_recorded_spec_is_valid_and_has_every_expected_name():
    assert cdi.validate(SPEC) == []
    names = cdi.device_names(SPEC)
    assert set(cdi.expected_names(gpu_info(), ["index", "uuid"])) == set(names)


def test_expected_names_with_mig_and_type_index():
    info = gpu_info({1: ["MIG-a", "MIG-b"]})
    assert cdi.expected_names(info, ["index"]) == ["0", "1", "1:0", "1:1", "2", "3", "all"]
    assert "mig1:1" in cdi.expected_names(info, ["type-index"]) and "MIG-b" in cdi.expected_names(info, ["uuid"])
    assert cdi.expected_names({"nvml": {"status": "driver not loaded", "gpus": []}}, ["index"]) == []


@pytest.mark.parametrize(("break_it", "message"), [
    (lambda s: s.update(cdiVersion="9.9.9"), "cdiVersion '9.9.9'"),
    (lambda s: s.update(kind="gpu"), "kind 'gpu' is not <vendor>/<class>"),
    (lambda s: s.update(devices=[]), "at least one device"),
    (lambda s: s["devices"].append(copy.deepcopy(s["devices"][0])), "the name is used twice"),
    (lambda s: s["devices"][0].update(containerEdits={}), "containerEdits is empty"),
    (lambda s: s["devices"][0]["containerEdits"]["deviceNodes"][0].update(path="dev/nvidia0"), "is not an absolute path"),
    (lambda s: s["containerEdits"]["hooks"][0].update(hookName="beforeLunch"), "hookName 'beforeLunch'"),
    (lambda s: s.update(extra=1), "unknown field extra"),
    (lambda s: s["devices"][0].update(name="bad name"), "not a valid device name"),
])
def test_each_rule_catches_its_fault(break_it, message):
    spec = copy.deepcopy(SPEC)
    break_it(spec)
    assert any(message in e for e in cdi.validate(spec)), cdi.validate(spec)


def test_device_names_are_the_names_in_order_and_only_names():
    assert cdi.device_names(SPEC)[-1] == "all" and cdi.device_names(SPEC)[0] == SPEC["devices"][0]["name"]
    # A device without a usable name has been refused by validate(); it is not counted as a name.
    assert cdi.device_names({"devices": [{"name": "0"}, {"containerEdits": {}}, {"name": 7}, "x"]}) == ["0"]

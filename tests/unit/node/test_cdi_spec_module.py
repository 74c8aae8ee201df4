"""The cdi_spec module with nvidia-ctk answering what it answered in the lab (its recorded spec)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import basic
from ansible_collections.gpuops.nvidia.plugins.modules import cdi_spec

from ..harness import call

RECORDED = (Path(__file__).parent / "recorded/nvidia-ctk-1.18.2-cdi-l40s.yaml").read_text()
UUIDS = ["GPU-63d77e99-612d-513c-a470-11229cab1ea2", "GPU-1d29a310-d579-5534-9ae4-86788ffdd627",
         "GPU-ed3817d9-b1dc-5ade-9fc2-357fd27bcca3", "GPU-39a358b9-2b7a-5927-8328-4602dce6e1d6"]
GPU_INFO = {"nvml": {"status": "ok", "gpus": [{"index": i, "uuid": u, "mig": {}} for i, u in enumerate(UUIDS)]}}


@pytest.fixture
def node(tmp_path, monkeypatch):
    calls = []
    answer = {"text": RECORDED, "rc": 0}

    def run_command(self, argv, **kw):
        calls.append(argv)
        if answer["rc"] == 0:
            out = next(a.split("=", 1)[1] for a in argv if a.startswith("--output="))
            Path(out).write_text(answer["text"])
            return 0, "", 'time="x" level=info msg="Generated CDI spec with version 0.5.0"\n'
        return 1, "", 'time="x" level=error msg="failed to generate CDI spec: failed to initialize NVML: Driver Not Loaded"\n'

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    spec = tmp_path / "run/cdi/nvidia.yaml"
    (tmp_path / "run").mkdir()

    def run(check=False, **args):
        params = {"path": str(spec), "nvidia_ctk": "/usr/bin/nvidia-ctk", "_ansible_check_mode": check,
                  "_ansible_diff": True, **args}
        return call(cdi_spec.main, params)

    return spec, run, calls, answer


def test_check_mode_then_write_then_nothing(node):
    spec, run, calls, _answer = node
    res = run(check=True, gpu_info=GPU_INFO)
    assert res["changed"] and not spec.exists() and res["diff"]["after"] == RECORDED
    assert not list(spec.parent.parent.glob(".gpuops-cdi-*")), "the work directory is removed"
    res = run(gpu_info=GPU_INFO, driver_root="/run/nvidia/driver")
    assert res["changed"] and spec.read_text() == RECORDED and oct(spec.stat().st_mode & 0o777) == "0o644"
    assert set(res["devices"]) == {"0", "1", "2", "3", *UUIDS, "all"} and res["cdi_version"] == "0.5.0"
    argv = calls[-1]
    assert argv[:3] == ["/usr/bin/nvidia-ctk", "cdi", "generate"]
    assert "--driver-root=/run/nvidia/driver" in argv and "--dev-root=/run/nvidia/driver" in argv
    assert "--format=yaml" in argv and "--device-name-strategy=index" in argv and "--device-name-strategy=uuid" in argv
    assert not run(gpu_info=GPU_INFO)["changed"]


def test_a_different_header_or_layout_is_no_change(node):
    spec, run, _calls, answer = node
    run()
    answer["text"] = "# regenerated\n" + yaml.safe_dump(yaml.safe_load(RECORDED), default_flow_style=True)
    res = run()
    assert not res["changed"] and spec.read_text() == RECORDED


def test_a_gpu_without_a_device_is_refused_before_writing(node):
    spec, run, _calls, _answer = node
    info = {"nvml": {"gpus": [*GPU_INFO["nvml"]["gpus"], {"index": 4, "uuid": "GPU-ffff", "mig": {}}]}}
    res = run(gpu_info=info)
    assert res["failed"] and re.search(r"no device for 4, GPU-ffff", res["msg"]) and not spec.exists()


def test_an_invalid_spec_is_refused_before_writing(node):
    spec, run, _calls, answer = node
    answer["text"] = RECORDED.replace("kind: nvidia.com/gpu", "kind: gpu")
    res = run()
    assert res["failed"] and "not valid" in res["msg"] and "kind 'gpu'" in res["msg"] and not spec.exists()


def test_nvidia_ctk_errors_are_reported(node):
    _spec, run, _calls, answer = node
    answer["rc"] = 1
    res = run()
    assert res["failed"] and "Driver Not Loaded" in res["msg"]


def test_absent_and_bad_path(node):
    spec, run, _calls, _answer = node
    run()
    assert run(state="absent")["changed"] and not spec.exists()
    assert not run(state="absent")["changed"]
    assert "must end in .json, .yaml or .yml" in run(path=str(spec.with_suffix(".conf")))["msg"]

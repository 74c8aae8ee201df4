"""The cdi_spec module with nvidia-ctk answering what it answered in the lab (its recorded spec)."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import basic
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import answers
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


def test_no_diff_without_diff_mode(node):
    spec, run = node[:2]
    res = run(_ansible_diff=False)
    assert res["changed"] and spec.read_text() == RECORDED and "diff" not in res
    res = run(_ansible_diff=False, state="absent")
    assert res["changed"] and not spec.exists() and "diff" not in res


def test_the_diff_names_the_file_when_written_and_removed(node):
    spec, run = node[:2]
    assert run()["diff"] == {"before_header": str(spec), "after_header": str(spec), "before": "", "after": RECORDED}
    assert "diff" not in run(), "no change, no diff"
    assert run(state="absent")["diff"] == {"before_header": str(spec), "after_header": str(spec), "before": RECORDED, "after": ""}
    assert "diff" not in run(state="absent")


def test_backup_of_the_spec_replaced_or_removed(node):
    spec, run = node[:2]
    spec.parent.mkdir(parents=True)
    spec.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n")
    res = run(backup=True)
    saved = Path(res["backup_file"])
    assert saved.read_text() == "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n" and spec.read_text() == RECORDED
    # The CDI loaders read .json, .yaml and .yml only: the copy must not end in one of them.
    assert saved.parent == spec.parent and saved.name.startswith("nvidia.yaml.") and saved.name.endswith("~")
    assert "backup_file" not in run(backup=True), "an unchanged spec is not copied"
    res = run(backup=True, state="absent")
    assert not spec.exists() and Path(res["backup_file"]).read_text() == RECORDED


def test_no_backup_unless_asked(node):
    spec, run = node[:2]
    spec.parent.mkdir(parents=True)
    spec.write_text("cdiVersion: 0.5.0\n")
    res = run()
    assert res["changed"] and "backup_file" not in res
    run(state="absent")
    assert list(spec.parent.iterdir()) == []


def test_check_mode_removes_nothing_and_makes_no_backup(node):
    spec, run = node[:2]
    run()
    res = run(check=True, state="absent", backup=True)
    assert res["changed"] and "backup_file" not in res and res["diff"]["before"] == RECORDED
    assert [p.name for p in spec.parent.iterdir()] == ["nvidia.yaml"]


def test_the_spec_is_0644_whatever_the_one_replaced_had(node):
    spec, run = node[:2]
    spec.parent.mkdir(parents=True)
    spec.write_text("cdiVersion: 0.5.0\n")
    spec.chmod(0o600)
    run()
    assert oct(spec.stat().st_mode & 0o777) == "0o644"


def test_nothing_but_the_spec_is_left_in_the_directory_the_runtimes_watch(node, monkeypatch):
    spec, run = node[:2]
    seen = []
    real = basic.AnsibleModule.atomic_move

    def atomic_move(self, src, dest, **kw):
        seen.append((Path(src).parent, sorted(p.name for p in spec.parent.iterdir()) if spec.parent.exists() else []))
        return real(self, src, dest, **kw)

    monkeypatch.setattr(basic.AnsibleModule, "atomic_move", atomic_move)
    run()
    (tmp_dir, listed), = seen
    assert tmp_dir != spec.parent and listed == []
    assert [p.name for p in spec.parent.iterdir()] == ["nvidia.yaml"]
    assert not list(spec.parent.parent.glob(".gpuops-cdi-*"))


def test_a_directory_in_the_specs_place_fails_without_a_traceback(node):
    spec, run = node[:2]
    spec.mkdir(parents=True)
    res = run()
    assert res["failed"] and "Is a directory" in res["msg"] and spec.is_dir()
    res = run(state="absent")
    assert res["failed"] and "Is a directory" in res["msg"] and spec.is_dir()


def test_files_go_in_place_after_the_spec_in_the_same_run(node, tmp_path):
    """The refresh service's drop-in with the spec: one round trip for the two on a converged node."""
    spec, run, _calls, _answer = node
    dropin = tmp_path / "nvidia-cdi-refresh.service.d/50-gpuops.conf"
    files = [{"path": str(dropin.parent), "state": "directory", "mode": "0755"},
             {"path": str(dropin), "content": "[Service]\n", "mode": "0644"}]
    res = run(check=True, gpu_info=GPU_INFO, files=files)
    assert res["changed"] and res["node_files"]["changed_paths"] == [str(dropin.parent), str(dropin)] and not dropin.parent.exists()
    res = run(gpu_info=GPU_INFO, files=files)
    assert res["changed"] and spec.read_text() == RECORDED and dropin.read_text() == "[Service]\n"
    again = run(gpu_info=GPU_INFO, files=files)
    assert not again["changed"] and again["node_files"]["changed_paths"] == []
    # A file changed alone is the run's change too.
    res = run(gpu_info=GPU_INFO, files=[files[0], {**files[1], "content": "[Service]\nEnvironment=A=1\n"}])
    assert res["changed"] and res["node_files"]["changed_paths"] == [str(dropin)]


def test_a_spec_that_fails_leaves_the_files_alone(node, tmp_path):
    _spec, run, _calls, answer = node
    answer["rc"] = 1
    res = run(files=[{"path": str(tmp_path / "d"), "state": "directory"}])
    assert res["failed"] and not (tmp_path / "d").exists()


def _answer(settings, refresh_unit=True):
    """container_runtime's answer for the spec (answers.cdi_spec), through a module that is not in check mode."""
    module = types.SimpleNamespace(check_mode=False, _diff=True, run_command=basic.AnsibleModule.run_command.__get__(object()),
                                   get_bin_path=basic.AnsibleModule.get_bin_path.__get__(object()))
    return answers.cdi_spec(module, settings, refresh_unit)


@pytest.mark.parametrize("converged", [False, True])
def test_the_checks_answer_for_the_spec_is_the_modules_check_mode_result_and_writes_nothing(node, tmp_path, converged):
    """What container_runtime returns for the toolkit role's spec stands for cdi_spec's run: the same result as its check
    mode, nothing written, on a node without the spec and on one with it."""
    spec, run, _calls, _answer_text = node
    unit = tmp_path / "unit.conf"
    settings = {"path": str(spec), "nvidia_ctk": "/usr/bin/nvidia-ctk", "gpu_info": GPU_INFO, "driver_root": None,
                "files": [{"path": str(unit), "content": "x\n", "mode": "0644"}], "units": []}
    if converged:
        run(**{k: v for k, v in settings.items() if k != "driver_root"})
    before = spec.read_text() if spec.exists() else None
    answer = _answer(settings)
    assert (spec.read_text() if spec.exists() else None) == before and unit.exists() is converged
    checked = run(check=True, _ansible_diff=False, **{k: v for k, v in settings.items() if k != "driver_root"})
    assert answer["result"] == {k: v for k, v in checked.items() if k not in ("failed", "invocation")}
    assert answer["result"]["changed"] is not converged
    assert answer["settings"] == {k: v for k, v in settings.items() if k != "gpu_info"}


def test_the_refresh_files_are_answered_only_where_the_toolkit_has_the_units(node, tmp_path):
    spec = node[0]
    settings = {"path": str(spec), "nvidia_ctk": "/usr/bin/nvidia-ctk", "files": [{"path": str(tmp_path / "u"), "content": "x\n"}],
                "units": [{"name": "nvidia-cdi-refresh.path", "enabled": True}]}
    answer = _answer(settings, refresh_unit=False)
    assert answer["settings"]["files"] == [] and answer["settings"]["units"] == [] and "node_files" not in answer["result"]


def test_a_spec_the_module_would_refuse_is_not_answered(node):
    spec, _run, _calls, answer_text = node
    answer_text["rc"] = 1
    assert _answer({"path": str(spec), "nvidia_ctk": "/usr/bin/nvidia-ctk"})["result"] is None
    assert _answer({"path": str(spec.with_suffix(".txt")), "nvidia_ctk": "/usr/bin/nvidia-ctk"})["result"] is None
    assert _answer({"path": str(spec), "kind": "nvidia"})["result"] is None

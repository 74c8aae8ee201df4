"""gpu_info's structure, declared once in _common/facts.py: what the module returns matches it key for key, and mypy
follows a key from where gpu_info writes it to where the collection reads it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import facts
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nvml

from lab.sim.hardware import profile_names

REPO = Path(__file__).resolve().parents[3]
MODULE_UTILS = "ansible_collections.gpuops.nvidia.plugins.module_utils"


@pytest.mark.parametrize("profile", profile_names())
def test_every_lab_profile_reads_back_as_the_declared_structure(profile, info_of, schema_errors):
    info = info_of(profile)
    assert schema_errors(info, facts.GpuInfo) == []
    assert info["schema_version"] == facts.SCHEMA_VERSION == 7


def test_without_the_binding_nvml_still_has_the_declared_shape(monkeypatch, schema_errors):
    monkeypatch.setattr(nvml, "HAS_PYNVML", False)
    answer = nvml.read_nvml(None)
    assert answer["status"] == "binding_missing" and answer["gpus"] == []
    assert schema_errors(answer, facts.NvmlFacts) == []


def test_the_structure_check_catches_a_renamed_key_and_a_wrong_type(info_of, schema_errors):
    info = info_of("a100-pcie-mig")
    renamed = {**info, "summary": {("gpus" if k == "gpu_count" else k): v for k, v in info["summary"].items()}}
    assert schema_errors(renamed, facts.GpuInfo) == ["GpuInfo.summary.gpu_count: missing", "GpuInfo.summary.gpus: not in SummaryFacts"]
    gpu = info["nvml"]["gpus"][0]
    wrong = {**info, "nvml": {**info["nvml"], "gpus": [{**gpu, "mig": {**gpu["mig"], "current": "yes"}}]}}
    assert schema_errors(wrong, facts.GpuInfo) == ["GpuInfo.nvml.gpus[0].mig.current: 'yes' is not a bool"]
    assert schema_errors({**info, "schema_version": 1}, facts.GpuInfo) == ["GpuInfo.schema_version: 1 is not one of (7,)"]


def test_labels_are_not_part_of_gpu_info():
    assert set(facts.DerivedFacts.__annotations__) == {"kernel_module_type", "fabric_manager"}


# (TypedDict, key): renamed in a copy of the schema, mypy must fail where gpu_info writes the key and where it is read.
RENAMED = {
    ("SummaryFacts", "gpu_count"): ("node/gpu_info.py", "_common/slim.py"),
    ("MigState", "current"): ("node/nvml.py", "node/cdi.py", "_common/slim.py", "cluster/gfd.py"),
    ("KernelState", "headers_installed"): ("node/hardware.py", "node/preflight.py"),
    ("GpuIdentity", "architecture"): ("node/hwdb.py", "node/derive.py", "node/gpu_info.py"),
}


def _rename(schema: str, typed_dict: str, key: str) -> str:
    body = re.search(rf"^class {typed_dict}\(.*?(?=^\S)", schema, re.MULTILINE | re.DOTALL)
    assert body, f"{typed_dict} is not declared in facts.py"
    renamed, count = re.subn(rf"^    {key}: ", f"    {key}_renamed: ", body.group(0), flags=re.MULTILINE)
    assert count == 1, f"{typed_dict} has no key {key}"
    return schema[:body.start()] + renamed + schema[body.end():]


def _mypy(tmp_path: Path, schema_edit) -> tuple[int, list[str]]:
    """mypy on a copy of plugins/ with the repository's own configuration, as `make lint` runs it."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "plugins", repo / "plugins", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", repo / "pyproject.toml")
    (repo / ".build/collections/ansible_collections/gpuops").mkdir(parents=True)
    (repo / ".build/collections/ansible_collections/gpuops/nvidia").symlink_to(repo)
    schema = repo / "plugins/module_utils/_common/facts.py"
    schema.write_text(schema_edit(schema.read_text()))
    modules = ("node.gpu_info", "node.preflight", "node.cdi", "_common.slim", "cluster.gfd")
    argv = [sys.executable, "-m", "mypy", "--no-error-summary", *(a for m in modules for a in ("-m", f"{MODULE_UTILS}.{m}"))]
    done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=300, check=False)
    assert not done.stderr, done.stderr
    return done.returncode, [line for line in done.stdout.splitlines() if ": error:" in line]


def _hits(errors: list[str], key: str, name: str) -> list[str]:
    return [e for e in errors if f"/module_utils/{name}:" in e and f'"{key}' in e]


def _rename_all(text: str) -> str:
    for typed_dict, key in RENAMED:
        text = _rename(text, typed_dict, key)
    return text


def test_a_key_renamed_in_the_schema_fails_the_type_check_where_it_is_written_and_read(tmp_path):
    rc, errors = _mypy(tmp_path, _rename_all)
    assert rc == 1
    for (typed_dict, key), files in RENAMED.items():
        for name in files:
            assert _hits(errors, key, name), f"renaming {typed_dict}.{key} should fail {name}; mypy said:\n" + "\n".join(errors)


def test_the_schema_as_it_is_gives_none_of_those_errors(tmp_path):
    """The same check on the unchanged schema: the errors above come from the rename, not from the copy."""
    _rc, errors = _mypy(tmp_path, lambda text: text)
    assert not [e for (_td, key), files in RENAMED.items() for name in files for e in _hits(errors, key, name)]

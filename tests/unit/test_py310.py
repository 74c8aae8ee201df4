"""Code under plugins/ runs on the managed nodes, whose oldest Python is Ubuntu 22.04's 3.10.

Three checks, each shown to catch what it is for: every file parses with 3.10's grammar (ast), every file
compiles under a real Python 3.10 where one is installed (it also knows the 3.11 syntax ast's feature_version
lets through), and the linters are set for 3.10 on plugins/ only (ruff's per-file target, mypy's
python_version, which rejects standard library names newer than 3.10).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
EXCEPT_STAR = "try:\n    pass\nexcept* ValueError:\n    pass\n"
STAR_INDEX = "def f(a, b):\n    return a[*b]\n"  # PEP 646, Python 3.11


def plugin_files() -> list[Path]:
    return sorted(p for p in PLUGINS.rglob("*.py") if "__pycache__" not in p.parts)


def py310_grammar_errors(source: str, name: str) -> list[str]:
    try:
        ast.parse(source, filename=name, feature_version=(3, 10))
    except SyntaxError as exc:
        return [f"{name}:{exc.lineno}: {exc.msg}"]
    return []


def test_every_plugin_file_parses_with_the_python_310_grammar():
    files = plugin_files()
    assert len(files) > 20
    errors = [e for f in files for e in py310_grammar_errors(f.read_text(), str(f.relative_to(REPO)))]
    assert errors == []


def test_the_grammar_check_rejects_except_star():
    (error,) = py310_grammar_errors(EXCEPT_STAR, "probe.py")
    assert error.startswith("probe.py:") and "only supported in Python 3.11" in error


@functools.cache
def python310() -> str | None:
    """A Python 3.10 interpreter that runs: $PYTHON310, one pyenv installed, or python3.10 on PATH."""
    candidates = [os.environ.get("PYTHON310"), *map(str, sorted(Path.home().glob(".pyenv/versions/3.10*/bin/python3.10"))),
                  shutil.which("python3.10")]
    for candidate in filter(None, candidates):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True,
                                  timeout=30, check=False)
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == "(3, 10)":
            return candidate
    return None


_COMPILE = """
import sys
failed = 0
for path in sys.argv[1:]:
    try:
        with open(path, encoding="utf-8") as handle:
            compile(handle.read(), path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        failed += 1
        print(f"{path}:{exc.lineno}: {exc.msg}")
print(sys.version_info[:2])
sys.exit(1 if failed else 0)
"""


def compile_under_310(interpreter: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([interpreter, "-I", "-c", _COMPILE, *map(str, files)], capture_output=True, text=True, timeout=120, check=False)


needs_310 = pytest.mark.skipif(python310() is None, reason="no Python 3.10 interpreter here (set PYTHON310)")


@needs_310
def test_every_plugin_file_compiles_under_python_310():
    done = compile_under_310(str(python310()), plugin_files())
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("(3, 10)")


@needs_310
def test_python_310_rejects_what_the_grammar_check_lets_through(tmp_path):
    star_index, except_star = tmp_path / "star_index.py", tmp_path / "except_star.py"
    star_index.write_text(STAR_INDEX)
    except_star.write_text(EXCEPT_STAR)
    assert py310_grammar_errors(STAR_INDEX, "star_index.py") == []  # why the real compile is needed
    done = compile_under_310(str(python310()), [star_index, except_star])
    assert done.returncode == 1
    assert f"{star_index}:2:" in done.stdout and f"{except_star}:3:" in done.stdout


_GPU_INFO = """
import json, sys
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import slim
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import gfd
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import gpu_info, preflight
info = gpu_info.collect(sys.argv[1], None)
found = preflight.findings(info, "Ubuntu", "22", {"driver_method": "precompiled", "fabricmanager_enabled": False})
print(json.dumps({"version": list(sys.version_info[:2]), "info": info, "slim": slim.slim(info),
                  "labels": gfd.node_gfd_labels(info)[0], "findings": [f["id"] for f in found]}))
"""


@needs_310
def test_gpu_info_and_what_reads_it_run_under_python_310(tmp_path):
    """The target-side path, run by a 3.10 interpreter on the lab's HGX H100 tree (no NVML there: the PCI view)."""
    from lab.sim.hardware import load_profile, write_hardware

    write_hardware(load_profile("hgx-h100"), tmp_path / "hw", "m", "5.15.0-1-generic", None)
    env = {**os.environ, "PYTHONPATH": str(REPO / ".build/collections")}
    done = subprocess.run([str(python310()), "-c", _GPU_INFO, str(tmp_path / "hw")], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["version"] == [3, 10]
    assert out["info"]["schema_version"] == 7 and out["info"]["nvml"]["status"] != "ok"
    assert (out["info"]["summary"]["gpu_count"], out["info"]["summary"]["nvswitch_count"]) == (8, 4)
    assert out["info"]["derived"]["fabric_manager"]["required"] is True
    assert out["slim"]["summary"] == {"gpu_count": 8, "mig_capable": None}
    assert out["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert "fabric_manager_disabled" in out["findings"]


def _ruff(source: str, path: str) -> subprocess.CompletedProcess[str]:
    ruff = Path(sys.executable).with_name("ruff")
    return subprocess.run([str(ruff), "check", "--no-cache", "--output-format=concise", "--stdin-filename", path, "-"],
                          input=source, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("source", [EXCEPT_STAR, STAR_INDEX])
def test_ruff_lints_plugins_for_python_310_and_the_rest_for_311(source):
    under_plugins = _ruff(source, "plugins/module_utils/node/probe.py")
    assert under_plugins.returncode == 1 and "on Python 3.10" in under_plugins.stdout, under_plugins.stdout + under_plugins.stderr
    elsewhere = _ruff(source, "lab/probe.py")
    assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr


def test_mypy_checks_plugins_against_the_310_standard_library(tmp_path):
    """The repository's mypy configuration, on a module using names the 3.11 standard library added."""
    (tmp_path / "probe_311.py").write_text("import tomllib\nfrom typing import Self\nimport datetime\n\nUTC = datetime.UTC\n")
    argv = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
            "-m", "probe_311"]
    done = subprocess.run(argv, cwd=REPO, env={**os.environ, "MYPYPATH": str(tmp_path)}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line.removeprefix(str(tmp_path) + os.sep) for line in done.stdout.splitlines()]
    assert any(line.startswith("probe_311.py:1: error:") and "tomllib" in line for line in lines), done.stdout
    assert any(line.startswith("probe_311.py:2: error:") and "Self" in line for line in lines), done.stdout
    assert any(line.startswith("probe_311.py:5: error:") and "UTC" in line for line in lines), done.stdout

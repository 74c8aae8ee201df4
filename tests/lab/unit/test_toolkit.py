"""The lab's toolkit repository: its index files, and the driver root the simulated hardware gives nvidia-ctk."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from lab import toolkit
from lab.sim.hardware import load_profile, write_driver_root


def test_release_lists_each_index_file_with_its_hash_and_size():
    files = {"Packages": b"Package: x\n", "Packages.gz": b"\x1f\x8b zipped"}
    release = toolkit.release_file(files)
    for name, data in files.items():
        assert f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}" in release
    assert "Architectures: amd64" in release


def test_control_names_the_package_nvidia_names_and_the_pinned_release():
    control = toolkit.control_file(40000)
    assert control.startswith("Package: nvidia-container-toolkit-base\n")
    assert f"Version: {toolkit.TOOLKIT_VERSION.lstrip('v')}-1\n" in control
    assert toolkit.TOOLKIT_VERSION in control and control.endswith("\n")


def test_status_without_a_server(tmp_path):
    assert toolkit.status(tmp_path) == {"running": False}
    assert toolkit.down(tmp_path) is False


def test_driver_root_has_what_nvidia_ctk_locates(tmp_path):
    profile = load_profile("hgx-h100")
    write_driver_root(tmp_path / "driver", profile["driver"]["version"], len(profile["gpus"]["bus_ids"]))
    lib = tmp_path / "driver/usr/lib/x86_64-linux-gnu"
    version = profile["driver"]["version"]
    assert os.readlink(lib / f"libnvidia-ml.so.{version}") == "../../../../nvml/libnvidia-ml.so.1"
    assert (lib / f"libcuda.so.{version}").exists() and os.access(tmp_path / "driver/usr/bin/nvidia-smi", os.X_OK)
    if os.geteuid() == 0:
        nodes = sorted(p.name for p in (tmp_path / "driver/dev").iterdir())
        assert nodes == sorted([f"nvidia{i}" for i in range(8)] + ["nvidiactl", "nvidia-uvm"])
        st = (tmp_path / "driver/dev/nvidiactl").stat()
        assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195 and os.minor(st.st_rdev) == 255


def _agents(home) -> list[int]:
    """The processes whose command line names this gpg home (gpg-agent's does: --homedir HOME)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(home).encode() in args:
                found.append(int(entry.name))
    return found


@pytest.mark.skipif(not shutil.which("gpg") or not shutil.which("gpgconf"), reason="needs GnuPG")
def test_signing_leaves_no_gpg_agent_running(tmp_path):
    """The repository's signing makes a key and signs with it; the agent gpg starts for it is gone afterwards."""
    home = tmp_path / "gnupg"
    release = tmp_path / "Release"
    release.write_text("Origin: test\n")
    with toolkit.gpg_agent_stopped_after(home):
        assert "BEGIN PGP PUBLIC KEY BLOCK" in toolkit.signing_key(home)
        toolkit._gpg(home, ["--local-user", toolkit.KEY_NAME, "--clearsign", "--output", str(tmp_path / "InRelease"),
                            str(release)])
        assert _agents(home), "gpg started no agent: the test shows nothing"
    assert _agents(home) == []


# -- the NRI plugin (issue 63) -----------------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_LAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


class FakeGoBuild:
    """Records go commands; `build -o OUT` leaves a file at OUT, as go would."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], Path, dict]] = []

    def __call__(self, args, cwd, log, what, env=None):
        self.calls.append((list(args), Path(cwd), dict(env or {})))
        if args[0] == "build":
            shutil.copy("/bin/true", args[args.index("-o") + 1])
        return ""


def test_the_nri_plugin_main_requires_the_toolkit_version_the_lab_pins():
    gomod = (toolkit.NRI_PLUGIN_SOURCE / "go.mod").read_text()
    assert f"github.com/NVIDIA/nvidia-container-toolkit {toolkit.TOOLKIT_NRI_VERSION}\n" in gomod
    main = (toolkit.NRI_PLUGIN_SOURCE / "main.go").read_text()
    # The toolkit's own plugin, not a copy of it: the package the installer runs.
    assert '"github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk-installer/container/runtime/nri"' in main
    for flag in ("nri-socket", "nri-plugin-index", "nri-namespace", "nri-management-cdi-device-namespaces"):
        assert f'"{flag}"' in main


def test_the_nri_plugin_is_built_static_outside_the_checkout_and_cached_by_its_source(cache, tmp_path, monkeypatch):
    source = tmp_path / "nri-plugin"
    shutil.copytree(toolkit.NRI_PLUGIN_SOURCE, source)
    go = FakeGoBuild()
    monkeypatch.setattr(toolkit, "_go", go)
    out = toolkit.build_nri_plugin(tmp_path / "log", source)
    assert out == cache / "toolkit/bin" / f"nri-plugin-{toolkit.nri_plugin_key(source)}"
    assert os.access(out / toolkit.NRI_PLUGIN, os.X_OK)
    ((args, cwd, env),) = go.calls
    assert args[:2] == ["build", "-trimpath"] and args[-1] == "."
    assert f"-X main.version={toolkit.TOOLKIT_NRI_VERSION}" in args[args.index("-ldflags") + 1]
    assert env["CGO_ENABLED"] == "0"
    # Built in a copy of the source, so the build writes nothing into the checkout.
    assert cwd != source and sorted(p.name for p in cwd.iterdir()) == sorted(toolkit.NRI_PLUGIN_FILES)
    assert toolkit.build_nri_plugin(tmp_path / "log", source) == out
    assert len(go.calls) == 1  # warm: nothing asked of go
    # An edit of the main is a new build.
    (source / "main.go").write_text((source / "main.go").read_text() + "\n// edited\n")
    assert toolkit.nri_plugin_key(source) != out.name.removeprefix("nri-plugin-")
    assert toolkit.build_nri_plugin(tmp_path / "log", source) != out
    assert len(go.calls) == 2

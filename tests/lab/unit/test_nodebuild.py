"""The real node's builds (lab/nodebuild.py and the kubelet in lab/toolchain.py): what each asks of go and gcc, where
it is cached, and that a warm cache builds nothing. The Go commands are recorded, not run (a cold build takes minutes;
the lab's real-node lane runs them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from lab import nodebuild, toolchain
from lab.errors import LabError
from lab.oci import File, shared_libraries


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_LAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


class FakeGo:
    """Records go commands; `install` and `build` leave a file per binary where go would."""

    def __init__(self, module_dir: Path) -> None:
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self.module_dir = module_dir

    def __call__(self, args, cwd, log, what, env=None):
        self.calls.append(list(args))
        self.envs.append(env or {})
        if args[:3] == ["mod", "download", "-json"]:
            return json.dumps({"Dir": str(self.module_dir), "Origin": {"Hash": "570e776d"}})
        if args[0] == "install":
            for pkg in args:
                if "@" in pkg:
                    target = Path(env["GOBIN"]) / pkg.split("@")[0].rsplit("/", 1)[1]
                    shutil.copy("/bin/true", target)
        return ""


@pytest.fixture
def fake_go(tmp_path, monkeypatch):
    go = FakeGo(tmp_path / "module")
    monkeypatch.setattr(nodebuild, "_go", go)
    return go


def test_cni_plugins_are_installed_at_the_pinned_release_and_cached(cache, fake_go, tmp_path):
    out = nodebuild.build_cni(tmp_path / "log")
    assert out == cache / "cluster/bin/cni-v1.9.1-r1"
    assert sorted(p.name for p in out.iterdir()) == ["bridge", "host-local", "loopback", "portmap"]
    (call,) = fake_go.calls
    assert call[0] == "install"
    assert "github.com/containernetworking/plugins/plugins/main/bridge@v1.9.1" in call
    assert "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v1.9.1" in call[call.index("-ldflags") + 1]
    assert nodebuild.build_cni(tmp_path / "log") == out
    assert len(fake_go.calls) == 1  # warm: nothing asked of go


def test_the_device_plugin_is_built_with_cgo_and_packed_with_its_libraries(cache, fake_go, tmp_path):
    out = nodebuild.build_device_plugin(tmp_path / "log")
    assert out == cache / "cluster/bin/device-plugin-v0.19.3-r1"
    install = next(c for c in fake_go.calls if c[0] == "install")
    assert fake_go.envs[fake_go.calls.index(install)]["CGO_ENABLED"] == "1"
    assert [p for p in install if "@" in p] == [f"github.com/NVIDIA/k8s-device-plugin/cmd/{b}@v0.19.3"
                                                for b in ("nvidia-device-plugin", "gpu-feature-discovery", "config-manager")]
    flags = install[install.index("-ldflags") + 1]
    assert "--unresolved-symbols=ignore-in-object-files" in flags
    assert "-X github.com/NVIDIA/k8s-device-plugin/internal/info.version=v0.19.3" in flags
    assert "internal/info.gitCommit=570e776d" in flags
    with tarfile.open(out / "image.tar") as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
    calls = len(fake_go.calls)
    assert nodebuild.build_device_plugin(tmp_path / "log") == out
    assert len(fake_go.calls) == calls


def test_the_device_plugin_image_holds_the_binaries_and_what_they_load(tmp_path):
    libs = {"/lib/x86_64-linux-gnu/libc.so.6": File(Path("/lib/x86_64-linux-gnu/libc.so.6"), 0o755)}
    files = nodebuild.device_plugin_files(tmp_path, libs)
    assert sorted(files) == ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/bin/config-manager", "/usr/bin/gpu-feature-discovery",
                             "/usr/bin/nvidia-device-plugin"]
    assert files["/usr/bin/nvidia-device-plugin"] == File(tmp_path / "nvidia-device-plugin", 0o755)


def test_the_pause_tag_is_the_releases():
    assert nodebuild.pause_version("ARCH ?= amd64\nTAG ?= 3.10.2\nREV = x\n") == "3.10.2"
    with pytest.raises(LabError, match="sets no TAG: the pause recipe no longer fits this release"):
        nodebuild.pause_version("REV = x\n")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_pause_is_compiled_static_from_the_releases_source_and_named_as_the_kubelets_sandbox(cache, tmp_path, monkeypatch):
    src = tmp_path / "kubernetes/build/pause"
    (src / "linux").mkdir(parents=True)
    (src / "Makefile").write_text("TAG ?= 3.10.2\n")
    # A stand-in for upstream's pause.c: prints its VERSION with -v, as upstream's does.
    (src / "linux/pause.c").write_text('#include <stdio.h>\n#include <string.h>\n#define S(x) #x\n#define V(x) S(x)\n'
                                       'int main(int c, char **v) { if (c > 1 && !strcmp(v[1], "-v")) printf("pause.c %s\\n", V(VERSION)); return 0; }\n')
    monkeypatch.setattr(nodebuild, "kubernetes_source", lambda _log: tmp_path / "kubernetes")
    archive, image = nodebuild.build_pause(tmp_path / "log")
    assert image == "registry.k8s.io/pause:3.10.2"
    assert archive == cache / "cluster/bin/pause-3.10.2-r1/image.tar"
    binary = archive.parent / "pause"
    assert shared_libraries(binary) == {}  # static: the image holds nothing else
    assert subprocess.run([str(binary), "-v"], capture_output=True, text=True, check=True).stdout == "pause.c v3.10.2-gpuops-lab\n"
    (src / "linux/pause.c").write_text("this does not compile")
    assert nodebuild.build_pause(tmp_path / "log") == (archive, image)  # warm: not compiled again


def test_the_kubelet_shares_the_control_planes_wrapper_and_has_its_own_cache(cache, monkeypatch, tmp_path):
    built = []

    def fake(name, binaries, log):
        built.append((name, binaries))
        return tmp_path

    monkeypatch.setattr(toolchain, "_build_kubernetes_commands", fake)
    toolchain.build_kubelet(tmp_path / "log")
    toolchain.build_kubernetes(tmp_path / "log")
    assert built == [("kubelet", ("kubelet",)), ("kubernetes", ("kube-apiserver", "kube-controller-manager", "kube-scheduler"))]


def test_a_warm_kubelet_asks_nothing_of_go(cache, monkeypatch, tmp_path):
    final = cache / "cluster/bin/kubelet-v1.36.3-r1"
    final.mkdir(parents=True)
    (final / "kubelet").write_bytes(b"")
    monkeypatch.setattr(toolchain, "_go", lambda *a, **k: pytest.fail("go was called"))
    assert toolchain.build_kubelet(tmp_path / "log") == final


def test_ensure_node_builds_builds_under_the_hosts_build_lock(cache, monkeypatch, tmp_path):
    import fcntl

    held = []

    def check_lock():
        with (cache / "locks/cluster-build.lock").open("a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fh, fcntl.LOCK_UN)
                held.append(False)
            except BlockingIOError:
                held.append(True)

    def build(_log):
        check_lock()
        return tmp_path

    monkeypatch.setattr(nodebuild, "build_kubelet", build)
    monkeypatch.setattr(nodebuild, "build_cni", build)
    monkeypatch.setattr(nodebuild, "build_device_plugin", build)
    monkeypatch.setattr(nodebuild, "build_pause", lambda log: (build(log), "registry.k8s.io/pause:3.10.2"))
    got = nodebuild.ensure_node_builds(progress=lambda _m: None)
    assert held == [True] * 4
    assert got.kubelet == tmp_path / "kubelet" and got.device_plugin_archive == tmp_path / "image.tar"
    assert got.device_plugin_image == "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"

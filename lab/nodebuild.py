"""What the lab's real node runs besides its machine's own packages, built from source once per version.

- the kubelet, from the control plane's Kubernetes release (lab/toolchain.py builds it with the control plane's
  wrapper module);
- the CNI plugins the node's pod network uses (bridge, host-local, loopback, portmap), from
  github.com/containernetworking/plugins at a pinned release;
- the pause image: the release's own `build/pause/linux/pause.c`, compiled static with gcc (as upstream's
  Makefile does, with its version), in a one-layer OCI archive named as the kubelet's default sandbox image;
- the smoke-test image the real-node lane gives the validation role (lab/sim/devices_probe.c, static: it lists the
  /dev/nvidia* a container was given), in a one-layer OCI archive;
- NVIDIA's k8s-device-plugin at DEVICE_PLUGIN_VERSION (the device plugin, GFD and the config manager, with cgo:
  go-nvml calls NVML's functions, resolved when it loads libnvidia-ml.so.1), in a one-layer OCI archive with the
  libraries the binaries load, named as the device_plugin and gpu_feature_discovery roles name the image.

The archives need no registry: `ctr -n k8s.io images import` loads them on the node. Everything lives in
<cache>/cluster/bin/<name>-<version>-r<recipe>, as the control plane's builds; a warm run builds nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import LabError
from .hostlock import host_lock
from .oci import File, shared_libraries, write_archive
from .toolchain import (
    KUBERNETES_VERSION,
    NODE_BINARIES,
    _empty_dir,
    _finish,
    _go,
    build_kubelet,
    cluster_cache,
    go_env,
    kubernetes_source,
)

CNI_MODULE = "github.com/containernetworking/plugins"
# v1.10.0 needs Go 1.26.8, the newest this host has; v1.9.1 builds with any Go since 1.24.
CNI_VERSION = "v1.9.1"
CNI_PLUGINS = ("main/bridge", "main/loopback", "ipam/host-local", "meta/portmap")
# NVIDIA's device plugin: the newest release the module proxy serves here (v0.20.0 answers 403). The lab's real-node
# lane pins the roles' gpuops_device_plugin_version and gpuops_gpu_feature_discovery_version to it.
DEVICE_PLUGIN_MODULE = "github.com/NVIDIA/k8s-device-plugin"
DEVICE_PLUGIN_VERSION = "v0.19.3"
DEVICE_PLUGIN_BINARIES = ("nvidia-device-plugin", "gpu-feature-discovery", "config-manager")
# The image the roles' manifests name (gpuops_cluster_registry's default, the roles' image names).
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
# go-nvml's cgo code calls NVML's functions by name; they are resolved when it dlopens the library at run time.
DEVICE_PLUGIN_EXTLDFLAGS = "-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files"
# The environment NVIDIA's image sets: it asks the NVIDIA runtime for every GPU's utilities, and no CUDA version.
DEVICE_PLUGIN_ENV = {"NVIDIA_DISABLE_REQUIRE": "true", "NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
PAUSE_IMAGE = "registry.k8s.io/pause"
PROBE_SOURCE = Path(__file__).resolve().parent / "sim/devices_probe.c"
PROBE_IMAGE = "registry.gpuops-lab.invalid/devices-probe"
NODE_RECIPES = {"cni": 1, "device-plugin": 1, "pause": 1, "probe": 1}


@dataclass(frozen=True)
class NodeBuilds:
    """Paths of what the real node runs."""

    kubelet: Path
    cni_bin: Path  # a directory: the node's /opt/cni/bin
    pause_archive: Path
    pause_image: str
    device_plugin_archive: Path
    device_plugin_image: str
    probe_archive: Path
    probe_image: str


def _node_dir(name: str, version: str) -> Path:
    return cluster_cache() / "bin" / f"{name}-{version}-r{NODE_RECIPES[name]}"


def build_cni(log: Path) -> Path:
    final = _node_dir("cni", CNI_VERSION)
    names = [p.rsplit("/", 1)[1] for p in CNI_PLUGINS]
    if all((final / n).exists() for n in names):
        return final
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    env = {**go_env(), "GOBIN": str(tmp)}
    _go(["install", "-trimpath", "-ldflags", f"-s -w -X {CNI_MODULE}/pkg/utils/buildversion.BuildVersion={CNI_VERSION}",
         *[f"{CNI_MODULE}/plugins/{p}@{CNI_VERSION}" for p in CNI_PLUGINS]], tmp, log, f"building the CNI plugins {CNI_VERSION}", env=env)
    return _finish(tmp, final)


def device_plugin_ldflags(version: str, commit: str) -> str:
    return (f"-s -w '-extldflags={DEVICE_PLUGIN_EXTLDFLAGS}' -X {DEVICE_PLUGIN_MODULE}/internal/info.version={version}"
            f" -X {DEVICE_PLUGIN_MODULE}/internal/info.gitCommit={commit}")


def device_plugin_files(bin_dir: Path, libraries: dict[str, File]) -> dict[str, File]:
    """The image's files: the binaries in /usr/bin and every library one of them loads."""
    files = {f"/usr/bin/{b}": File(bin_dir / b, 0o755) for b in DEVICE_PLUGIN_BINARIES}
    return {**libraries, **files}


def build_device_plugin(log: Path) -> Path:
    final = _node_dir("device-plugin", DEVICE_PLUGIN_VERSION)
    archive = final / "image.tar"
    if archive.exists():
        return final
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    env = {**go_env(), "CGO_ENABLED": "1", "GOBIN": str(tmp)}
    info = json.loads(_go(["mod", "download", "-json", f"{DEVICE_PLUGIN_MODULE}@{DEVICE_PLUGIN_VERSION}"], tmp, log,
                          f"fetching {DEVICE_PLUGIN_MODULE} {DEVICE_PLUGIN_VERSION}", env=env))
    commit = (info.get("Origin") or {}).get("Hash", "")
    _go(["install", "-trimpath", "-ldflags", device_plugin_ldflags(DEVICE_PLUGIN_VERSION, commit),
         *[f"{DEVICE_PLUGIN_MODULE}/cmd/{b}@{DEVICE_PLUGIN_VERSION}" for b in DEVICE_PLUGIN_BINARIES]],
        tmp, log, f"building NVIDIA's device plugin {DEVICE_PLUGIN_VERSION}", env=env)
    libraries: dict[str, File] = {}
    for b in DEVICE_PLUGIN_BINARIES:
        libraries.update(shared_libraries(tmp / b))
    write_archive(tmp / "image.tar", f"{DEVICE_PLUGIN_IMAGE}:{DEVICE_PLUGIN_VERSION}", device_plugin_files(tmp, libraries),
                  entrypoint=["nvidia-device-plugin"], env=DEVICE_PLUGIN_ENV)
    return _finish(tmp, final)


def pause_version(makefile: str) -> str:
    """The pause image's tag from the release's build/pause/Makefile ('TAG ?= 3.10.2')."""
    m = re.search(r"^TAG\s*\?=\s*(\S+)\s*$", makefile, re.MULTILINE)
    if not m:
        raise LabError("build/pause/Makefile of the kubernetes release sets no TAG: the pause recipe no longer fits this release")
    return m.group(1)


def build_pause(log: Path) -> tuple[Path, str]:
    """The pause image archive and its name (registry.k8s.io/pause:<the release's tag>)."""
    src = kubernetes_source(log) / "build/pause"
    tag = pause_version((src / "Makefile").read_text())
    final = _node_dir("pause", tag)
    image = f"{PAUSE_IMAGE}:{tag}"
    if (final / "image.tar").exists():
        return final / "image.tar", image
    built = _static_image(tmp=_empty_dir(final.with_name(final.name + ".tmp")), source=src / "linux/pause.c", binary="pause",
                          image=image, what="the pause container", log=log, flags=[f"-DVERSION=v{tag}-gpuops-lab"])
    return _finish(built, final) / "image.tar", image


def _static_image(tmp: Path, source: Path, binary: str, image: str, what: str, log: Path, flags: list[str] | None = None) -> Path:
    """Build one C source static with gcc into tmp and write tmp/image.tar: a one-file image that runs it."""
    if shutil.which("gcc") is None:
        raise LabError(f"gcc not found: the lab builds {what} with it ('make lab-deps')")
    res = subprocess.run(["gcc", "-Os", "-Wall", "-Werror", "-static", *(flags or []), "-o", str(tmp / binary), str(source)],
                         capture_output=True, text=True, check=False)
    with log.open("a") as fh:
        fh.write(f"$ gcc ... {source.name}\n{res.stdout}{res.stderr}\n")
    if res.returncode != 0:
        raise LabError(f"building {what} failed: {res.stderr.strip()} (full log: {log})")
    write_archive(tmp / "image.tar", image, {f"/{binary}": File(tmp / binary, 0o755)}, entrypoint=[f"/{binary}"])
    return tmp


def build_probe(log: Path) -> tuple[Path, str]:
    """The smoke-test image archive and its name (tagged with the recipe and the source's digest)."""
    import hashlib

    digest = hashlib.sha256(PROBE_SOURCE.read_bytes()).hexdigest()[:12]
    final = _node_dir("probe", digest)
    image = f"{PROBE_IMAGE}:r{NODE_RECIPES['probe']}-{digest}"
    if (final / "image.tar").exists():
        return final / "image.tar", image
    built = _static_image(tmp=_empty_dir(final.with_name(final.name + ".tmp")), source=PROBE_SOURCE, binary="devices-probe",
                          image=image, what="its smoke-test image", log=log)
    return _finish(built, final) / "image.tar", image


def ensure_node_builds(progress: Callable[[str], object] = print) -> NodeBuilds:
    """Build (or find) everything the real node runs; one builder at a time on the host, as ensure_toolchain."""
    log = cluster_cache() / "logs" / f"node-build-{time.strftime('%Y%m%d-%H%M%S')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with host_lock("cluster-build"):
        t0 = time.monotonic()
        kubelet = build_kubelet(log) / NODE_BINARIES[0]
        cni = build_cni(log)
        pause, pause_image = build_pause(log)
        device_plugin = build_device_plugin(log) / "image.tar"
        probe, probe_image = build_probe(log)
        took = time.monotonic() - t0
    if took > 1:
        progress(f"lab node: built the kubelet {KUBERNETES_VERSION}, CNI {CNI_VERSION}, {pause_image}, "
                 f"device plugin {DEVICE_PLUGIN_VERSION} in {took:.0f}s")
    return NodeBuilds(kubelet, cni, pause, pause_image, device_plugin, f"{DEVICE_PLUGIN_IMAGE}:{DEVICE_PLUGIN_VERSION}",
                      probe, probe_image)

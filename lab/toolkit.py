"""The lab's NVIDIA Container Toolkit repository: what an air-gapped site's mirror of NVIDIA's apt repository is.

NVIDIA's repository is not reachable from the lab, so the lab builds the toolkit from its Go module at a
pinned release (nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook, with cgo for go-nvml), packages
them as `nvidia-container-toolkit-base` the way NVIDIA's package lays them out (binaries in /usr/bin, the
nvidia-cdi-refresh units, a postinst that writes the default config.toml), and publishes a flat apt
repository signed with the lab's own key - the layout of NVIDIA's (`<base>/$(ARCH)/` with Packages,
Release, InRelease, and `gpgkey` beside it). `repo up` serves it on 127.0.0.1 (the machines share the
host's network); the role installs from it exactly as from NVIDIA's.

Served beside it under `tools/`: crictl (sigs.k8s.io/cri-tools), so tests can read CRI `info`, and CRI-O
(github.com/cri-o/cri-o, with its pinns helper built from the module's C sources), whose other parts
(conmon, crun) come from the distributions; and containerd 2.3 (containerd, containerd-shim-runc-v2, ctr from
github.com/containerd/containerd/v2), the first release with config version 4, which no distribution archive the
lab reaches has: a machine installs its distribution's containerd (the unit, runc) and puts these in its place.
And the toolkit's NRI plugin (issue 63's NRI mode), which NVIDIA ships only inside its installer image: lab/nri-plugin,
a main of a few lines over the toolkit module's package `nri` (TOOLKIT_NRI_VERSION), built static; the
container_toolkit role installs it from gpuops_container_toolkit_nri_plugin_source.
Everything built is cached in <cache>/toolkit, keyed by version and recipe.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .errors import LabError, require_free_port
from .images import cache_dir
from .machines import process_start, same_process
from .toolchain import _empty_dir, _finish, _go, build_in_wrapper, go_env

TOOLKIT_MODULE = "github.com/NVIDIA/nvidia-container-toolkit"
TOOLKIT_VERSION = "v1.18.2"
TOOLKIT_BINARIES = ("nvidia-ctk", "nvidia-container-runtime", "nvidia-cdi-hook")
CRI_TOOLS_VERSION = "v1.36.0"
CRIO_MODULE = "github.com/cri-o/cri-o"
CRIO_VERSION = "v1.34.0"
# Build tags that leave out what needs C libraries the lab does not install (gpgme, btrfs, devmapper).
CRIO_TAGS = "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper"
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_VERSION = "v2.3.7"
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
# Leave out the snapshotters that need C libraries (btrfs, devmapper, zfs are cgo-only or off without cgo anyway).
CONTAINERD_TAGS = "no_btrfs no_devmapper no_zfs"
# The NRI plugin's toolkit version: its package `nri` is in v1.19.0 and later (not in the v1.18 the repository packages),
# v1.20.2 the newest this proxy serves. lab/nri-plugin/go.mod requires it; a test checks they agree.
TOOLKIT_NRI_VERSION = "v1.20.2"
NRI_PLUGIN = "gpuops-nvidia-nri-plugin"
NRI_PLUGIN_SOURCE = Path(__file__).resolve().parent / "nri-plugin"
NRI_PLUGIN_FILES = ("go.mod", "go.sum", "main.go")
# Bump when the package or repository layout changes, so the cache is rebuilt.
RECIPE = 2
PACKAGE = "nvidia-container-toolkit-base"
ARCH = "amd64"
DEFAULT_PORT = 8461
KEY_NAME = "gpuops lab toolkit repository <lab@gpuops.invalid>"


def toolkit_cache() -> Path:
    return cache_dir() / "toolkit"


def build_binaries(log: Path) -> Path:
    """nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook and the refresh units, from the Go module."""
    final = toolkit_cache() / "bin" / f"toolkit-{TOOLKIT_VERSION}-r{RECIPE}"
    if all((final / b).exists() for b in TOOLKIT_BINARIES) and (final / "systemd").is_dir():
        return final
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    # cgo: go-nvml loads libnvidia-ml.so.1 with dlopen.
    env = {**go_env(), "CGO_ENABLED": "1", "GOBIN": str(tmp)}
    ldflags = f"-s -w -X {TOOLKIT_MODULE}/internal/info.version={TOOLKIT_VERSION.lstrip('v')}"
    _go(["install", "-trimpath", "-ldflags", ldflags, *[f"{TOOLKIT_MODULE}/cmd/{b}@{TOOLKIT_VERSION}" for b in TOOLKIT_BINARIES]],
        tmp, log, f"building the NVIDIA Container Toolkit {TOOLKIT_VERSION}", env=env)
    info = json.loads(_go(["mod", "download", "-json", f"{TOOLKIT_MODULE}@{TOOLKIT_VERSION}"], tmp, log,
                          f"fetching {TOOLKIT_MODULE} {TOOLKIT_VERSION}", env=env))
    shutil.copytree(Path(info["Dir"]) / "deployments/systemd", tmp / "systemd")
    for path in (tmp / "systemd").iterdir():
        path.chmod(0o644)
    return _finish(tmp, final)


def build_crictl(log: Path) -> Path:
    final = toolkit_cache() / "bin" / f"crictl-{CRI_TOOLS_VERSION}"
    if (final / "crictl").exists():
        return final
    # Through a wrapper module: `go install .../cmd/crictl@v` first asks the proxy for a module named
    # .../cmd/crictl, and this proxy answers 403 (not 404) for one that does not exist, which go treats as fatal.
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    build_in_wrapper(toolkit_cache() / "src" / f"cri-tools-{CRI_TOOLS_VERSION}", "sigs.k8s.io/cri-tools", CRI_TOOLS_VERSION,
                     "sigs.k8s.io/cri-tools/cmd/crictl", tmp / "crictl", log)
    return _finish(tmp, final)


def build_crio(log: Path) -> Path:
    """crio from its Go module, and pinns (its C helper) from the module's sources with the host's gcc."""
    final = toolkit_cache() / "bin" / f"crio-{CRIO_VERSION}"
    if (final / "crio").exists() and (final / "pinns").exists():
        return final
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    env = {**go_env(), "CGO_ENABLED": "1"}
    info = json.loads(_go(["mod", "download", "-json", f"{CRIO_MODULE}@{CRIO_VERSION}"], tmp, log,
                          f"fetching {CRIO_MODULE} {CRIO_VERSION}", env=env))
    upstream = Path(info["Dir"])
    gomod = json.loads(_go(["mod", "edit", "-json", info["GoMod"]], tmp, log, "reading cri-o's go.mod", env=env))
    # cri-o's own go.sum: several of its pseudo-versioned dependencies are not in the checksum database
    # this proxy serves, and these are the hashes cri-o was released with.
    build_in_wrapper(toolkit_cache() / "src" / f"cri-o-{CRIO_VERSION}", CRIO_MODULE, CRIO_VERSION, f"{CRIO_MODULE}/cmd/crio",
                     tmp / "crio", log, go=gomod["Go"], tags=CRIO_TAGS, go_sum=upstream / "go.sum", env=env)
    res = subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-static", "-o", str(tmp / "pinns"),
                          *sorted(str(p) for p in (upstream / "pinns/src").glob("*.c"))],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise LabError(f"building pinns failed: {res.stderr.strip()[-500:]}")
    return _finish(tmp, final)


def build_containerd(log: Path) -> Path:
    """containerd, its runc shim and ctr from the Go module, static (CGO off), with the release's version string."""
    final = toolkit_cache() / "bin" / f"containerd-{CONTAINERD_VERSION}"
    if all((final / b).exists() for b in CONTAINERD_BINARIES):
        return final
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    env = go_env()
    info = json.loads(_go(["mod", "download", "-json", f"{CONTAINERD_MODULE}@{CONTAINERD_VERSION}"], tmp, log,
                          f"fetching {CONTAINERD_MODULE} {CONTAINERD_VERSION}", env=env))
    gomod = json.loads(_go(["mod", "edit", "-json", info["GoMod"]], tmp, log, "reading containerd's go.mod", env=env))
    ldflags = f"-s -w -X {CONTAINERD_MODULE}/version.Version={CONTAINERD_VERSION.lstrip('v')}"
    first, *rest = CONTAINERD_BINARIES
    build_in_wrapper(toolkit_cache() / "src" / f"containerd-{CONTAINERD_VERSION}", CONTAINERD_MODULE, CONTAINERD_VERSION,
                     f"{CONTAINERD_MODULE}/cmd/{first}", tmp / first, log, go=gomod["Go"], tags=CONTAINERD_TAGS,
                     go_sum=Path(info["Dir"]) / "go.sum", env=env, ldflags=ldflags,
                     more={f"{CONTAINERD_MODULE}/cmd/{b}": tmp / b for b in rest})
    return _finish(tmp, final)


def nri_plugin_key(source: Path = NRI_PLUGIN_SOURCE) -> str:
    """The plugin build's cache key: the toolkit version and a digest of its source (main.go, go.mod, go.sum), so an edit
    of the main rebuilds it."""
    digest = hashlib.sha256()
    for name in NRI_PLUGIN_FILES:
        digest.update(name.encode() + b"\0" + (source / name).read_bytes() + b"\0")
    return f"{TOOLKIT_NRI_VERSION}-{digest.hexdigest()[:12]}"


def nri_plugin_build_args(out: Path) -> list[str]:
    """The go command that builds the plugin, static (CGO off), with the toolkit version in its --version."""
    return ["build", "-trimpath", "-ldflags", f"-s -w -X main.version={TOOLKIT_NRI_VERSION}", "-o", str(out), "."]


def build_nri_plugin(log: Path, source: Path = NRI_PLUGIN_SOURCE) -> Path:
    """The NRI plugin from lab/nri-plugin (copied out of the checkout, so the build writes nothing in it), cached by
    nri_plugin_key; returns the directory that holds it."""
    final = toolkit_cache() / "bin" / f"nri-plugin-{nri_plugin_key(source)}"
    if (final / NRI_PLUGIN).exists():
        return final
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    src = _empty_dir(toolkit_cache() / "src" / "nri-plugin")
    for name in NRI_PLUGIN_FILES:
        shutil.copy2(source / name, src / name)
    _go(nri_plugin_build_args(tmp / NRI_PLUGIN), src, log, f"building the NRI plugin over the toolkit {TOOLKIT_NRI_VERSION}",
        env={**go_env(), "CGO_ENABLED": "0"})
    return _finish(tmp, final)


def deb_version() -> str:
    return TOOLKIT_VERSION.lstrip("v") + "-1"


def control_file(installed_kib: int) -> str:
    return (f"Package: {PACKAGE}\nVersion: {deb_version()}\nArchitecture: {ARCH}\n"
            "Maintainer: gpuops lab <lab@gpuops.invalid>\nSection: utils\nPriority: optional\n"
            f"Installed-Size: {installed_kib}\n"
            f"Description: NVIDIA Container Toolkit Base (lab build of {TOOLKIT_MODULE} {TOOLKIT_VERSION})\n"
            " nvidia-ctk, nvidia-container-runtime and nvidia-cdi-hook, built from the Go module by the\n"
            " gpuops.nvidia lab for its local repository.\n")


POSTINST = """#!/bin/sh
set -e
# As NVIDIA's package does: write the default config when there is none, keep a present one.
if [ "$1" = configure ]; then
    mkdir -p /etc/nvidia-container-runtime
    /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
fi
"""


def build_deb(binaries: Path, out_dir: Path) -> Path:
    stage = _empty_dir(out_dir / "stage")
    for name in TOOLKIT_BINARIES:
        dest = stage / "usr/bin" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binaries / name, dest)
        dest.chmod(0o755)
    units = stage / "lib/systemd/system"
    units.mkdir(parents=True)
    for unit in ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"):
        shutil.copy2(binaries / "systemd" / unit, units / unit)
    env_dir = stage / "etc/nvidia-container-toolkit"
    env_dir.mkdir(parents=True)
    shutil.copy2(binaries / "systemd/nvidia-cdi-refresh.env", env_dir / "nvidia-cdi-refresh.env")
    size = sum(p.stat().st_size for p in stage.rglob("*") if p.is_file()) // 1024 + 1
    debian = stage / "DEBIAN"
    debian.mkdir()
    (debian / "control").write_text(control_file(size))
    (debian / "conffiles").write_text("/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env\n")
    (debian / "postinst").write_text(POSTINST)
    (debian / "postinst").chmod(0o755)
    deb = out_dir / f"{PACKAGE}_{deb_version()}_{ARCH}.deb"
    res = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(deb)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise LabError(f"dpkg-deb failed: {res.stderr.strip()}")
    shutil.rmtree(stage)
    return deb


def _gpg(home: Path, args: list[str]) -> str:
    res = subprocess.run(["gpg", "--batch", "--homedir", str(home), "--pinentry-mode", "loopback", "--passphrase", "", *args],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise LabError(f"gpg {' '.join(args[:2])} failed: {res.stderr.strip()}")
    return res.stdout


@contextlib.contextmanager
def gpg_agent_stopped_after(home: Path):
    """gpg starts an agent for the secret key (its --homedir on its command line) and leaves it running after gpg ends:
    stopped here once the signing is done, as the lab stops what it starts."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False,
                           timeout=30)


def signing_key(home: Path) -> str:
    """The lab repository's key (made once), as an ASCII-armored public key."""
    if not (home / "pubring.kbx").exists() or not _gpg(home, ["--list-secret-keys", KEY_NAME]).strip():
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        _gpg(home, ["--quick-generate-key", KEY_NAME, "ed25519", "sign", "never"])
    return _gpg(home, ["--armor", "--export", KEY_NAME])


def packages_entry(deb: Path, rel: str) -> str:
    data = deb.read_bytes()
    control = subprocess.run(["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True).stdout
    return (control.rstrip("\n") + f"\nFilename: {rel}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n")


def release_file(files: dict[str, bytes]) -> str:
    lines = ["Origin: gpuops-lab", "Label: nvidia-container-toolkit (gpuops lab)", f"Architectures: {ARCH}",
             f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S UTC', time.gmtime())}", "SHA256:"]
    lines += [f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}" for name, data in sorted(files.items())]
    return "\n".join(lines) + "\n"


def build_repo(progress=print) -> Path:
    """The signed flat repository (cached); returns its root, which holds gpgkey, <arch>/ and tools/."""
    root = toolkit_cache() / (f"repo-{TOOLKIT_VERSION}-{CRI_TOOLS_VERSION}-{CRIO_VERSION}-{CONTAINERD_VERSION}"
                              f"-nri-{nri_plugin_key()}-r{RECIPE}")
    if (root / ARCH / "InRelease").exists() and all((root / "tools" / name).exists() for name in ("crio", "containerd", NRI_PLUGIN)):
        return root
    log = toolkit_cache() / "logs" / f"build-{time.strftime('%Y%m%d-%H%M%S')}.log"
    t0 = time.monotonic()
    binaries = build_binaries(log)
    crictl = build_crictl(log)
    crio = build_crio(log)
    containerd = build_containerd(log)
    nri_plugin = build_nri_plugin(log)
    tmp = _empty_dir(root.with_name(root.name + ".tmp"))
    arch_dir = tmp / ARCH
    arch_dir.mkdir()
    deb = build_deb(binaries, arch_dir)
    packages = packages_entry(deb, f"./{deb.name}").encode()
    files = {"Packages": packages, "Packages.gz": gzip.compress(packages, mtime=0)}
    for name, data in files.items():
        (arch_dir / name).write_bytes(data)
    home = toolkit_cache() / "gnupg"
    (arch_dir / "Release").write_text(release_file(files))
    with gpg_agent_stopped_after(home):
        (tmp / "gpgkey").write_text(signing_key(home))
        _gpg(home, ["--local-user", KEY_NAME, "--clearsign", "--output", str(arch_dir / "InRelease"), str(arch_dir / "Release")])
        _gpg(home, ["--local-user", KEY_NAME, "--armor", "--detach-sign", "--output", str(arch_dir / "Release.gpg"),
                    str(arch_dir / "Release")])
    (tmp / "tools").mkdir()
    shutil.copy2(crictl / "crictl", tmp / "tools/crictl")
    shutil.copy2(binaries / "nvidia-ctk", tmp / "tools/nvidia-ctk")
    for name in ("crio", "pinns"):
        shutil.copy2(crio / name, tmp / "tools" / name)
    for name in CONTAINERD_BINARIES:
        shutil.copy2(containerd / name, tmp / "tools" / name)
    shutil.copy2(nri_plugin / NRI_PLUGIN, tmp / "tools" / NRI_PLUGIN)
    progress(f"lab toolkit repository: built in {time.monotonic() - t0:.0f}s ({root})")
    return _finish(tmp, root)


# -- serving ----------------------------------------------------------------------------------


def _state(state_dir: Path) -> Path:
    return state_dir / "toolkit-repo.json"


def _alive(data: dict) -> bool:
    """Whether the recorded server still runs (the same process, not one that has taken its PID since)."""
    return same_process(data["pid"], data.get("start"))


def status(state_dir: Path) -> dict:
    path = _state(state_dir)
    if not path.exists():
        return {"running": False}
    data = json.loads(path.read_text())
    data["running"] = _alive(data)
    return data


def up(state_dir: Path, port: int = DEFAULT_PORT, progress=print) -> dict:
    """Serve the repository on 127.0.0.1:port (a server already running for this state is kept)."""
    current = status(state_dir)
    if current["running"]:
        return current
    root = build_repo(progress)
    require_free_port(port, "stop what holds it or pick another with --port / GPUOPS_LAB_REPO_PORT")
    state_dir.mkdir(parents=True, exist_ok=True)
    logf = (state_dir / "toolkit-repo.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(root), str(port)],
                            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _attempt in range(50):
        try:
            with urllib.request.urlopen(f"{url}/{ARCH}/InRelease", timeout=1):
                pass
            if proc.poll() is None:
                break
        except OSError:
            if proc.poll() is not None:
                raise LabError(f"the repository server exited with {proc.returncode}; see {state_dir / 'toolkit-repo.log'}") from None
            time.sleep(0.1)
    else:
        proc.kill()
        raise LabError(f"the repository server did not answer on {url}")
    data = {"pid": proc.pid, "start": process_start(proc.pid), "port": port, "url": url, "root": str(root), "version": deb_version(),
            "key_url": f"{url}/gpgkey", "package": PACKAGE}
    _state(state_dir).write_text(json.dumps(data, indent=2) + "\n")
    data["running"] = True
    return data


def down(state_dir: Path) -> bool:
    """Stop the server this state started (by its recorded PID); False when none was running."""
    path = _state(state_dir)
    if not path.exists():
        return False
    data = json.loads(path.read_text())
    stopped = False
    if _alive(data):
        os.kill(data["pid"], signal.SIGTERM)
        for _attempt in range(50):
            if not _alive(data):
                break
            time.sleep(0.1)
        stopped = True
    path.unlink()
    return stopped

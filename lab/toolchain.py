"""Build the lab cluster's binaries from Go modules, once per version, cached outside the repository.

- kube-apiserver, kube-controller-manager, kube-scheduler from `k8s.io/kubernetes` through a wrapper
  module of ours. `k8s.io/kubernetes` requires its staging modules at v0.0.0 and maps them to
  ./staging, which a consumer cannot use; the wrapper replaces each with the matching v0.<minor>.<patch>
  tag. The list of staging modules comes from that release's own go.mod (fetched through the module
  proxy with `go mod download -json` and read with `go mod edit -json`), so a release that adds one
  needs no change here.
- etcd from `go.etcd.io/etcd/server/v3` through a second wrapper (its replace directives stop `go install`).
- kwok and kwokctl with `go install` at a pinned release.

Everything is built with the machine's Go (GOTOOLCHAIN=local: a go line newer than it is an error, not a
download) and CGO_ENABLED=0. A component's binaries live in <cache>/cluster/bin/<name>-<version>-r<recipe>;
a warm run finds them and builds nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import LabError
from .hostlock import host_lock
from .images import cache_dir
from .retry import Backoff, note_retry, retry

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
# Node Feature Discovery: nfd-master (publishes NodeFeature labels on Nodes) and its CRDs, as the
# node_feature_discovery role deploys them (its default version).
NFD_VERSION = "v0.19.0"
NFD_MODULE = "sigs.k8s.io/node-feature-discovery"
NFD_CRDS = "deployment/base/nfd-crds/nfd-api-crds.yaml"
# Bump a recipe when the way a component is built changes, so cached binaries are rebuilt.
RECIPES = {"kubernetes": 1, "etcd": 1, "kwok": 1, "nfd": 1, "kubelet": 1}
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
# What the lab's real node runs of the release (lab/nodebuild.py builds the rest of the node).
NODE_BINARIES = ("kubelet",)
WRAPPER_MODULE = "gpuops.invalid/lab"
# Retries of a go command whose download failed on the network (the module cache keeps what did arrive).
GO_RETRY = Backoff(attempts=4, first=2.0, cap=30.0)
# A download failure another try may cure: the network or the proxy, not the module.
_GO_TRANSIENT = re.compile(
    r"connection reset|connection refused|i/o timeout|timeout awaiting|TLS handshake|unexpected EOF|context deadline exceeded"
    r"|temporary failure in name resolution|server misbehaving|http2: |:\s(?:5\d\d|429)\b",
    re.IGNORECASE,
)
# A real error: the module or version does not exist, or is not what the checksums say.
_GO_PERMANENT = re.compile(r"unknown revision|invalid version|:\s(?:404|410)\b|checksum mismatch|SECURITY ERROR|malformed module path", re.IGNORECASE)
_GO_MODULE = re.compile(r"(?<![\w.~/-])([A-Za-z0-9][\w.~/-]*@v\d[\w.+-]*)")
_GO_PROXY_PATH = re.compile(r"://[^/\s]+/([^\s:@]+)/@(?:v/(v[^/\s]+?)\.(?:info|mod|zip)|v/list|latest)\b")


@dataclass(frozen=True)
class Toolchain:
    """Paths of the built binaries."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path
    kwok: Path
    kwokctl: Path
    nfd_master: Path
    nfd_crds: Path  # the release's CRD manifest, from the module


def cluster_cache() -> Path:
    return cache_dir() / "cluster"


def _bin_dir(name: str, version: str) -> Path:
    return cluster_cache() / "bin" / f"{name}-{version}-r{RECIPES[name]}"


def go_env() -> dict[str, str]:
    """The environment every Go command of the lab runs in."""
    if shutil.which("go") is None:
        raise LabError("go not found: the lab cluster builds its control plane with the machine's Go toolchain")
    return {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "LC_ALL": "C"}


class GoFailed(LabError):
    """A go command that failed; carries its error lines so a caller can tell a network failure."""

    def __init__(self, message: str, errors: list[str]) -> None:
        super().__init__(message)
        self.errors = errors


def _json_errors(stdout: str) -> list[str]:
    """The "Error" fields of the JSON objects a `go ... -json` command printed (it reports failures there)."""
    found, pos, decoder = [], 0, json.JSONDecoder()
    while True:
        start = stdout.find("{", pos)
        if start < 0:
            return found
        try:
            obj, pos = decoder.raw_decode(stdout, start)
        except ValueError:
            return found
        if isinstance(obj, dict) and isinstance(obj.get("Error"), str):
            found.append(obj["Error"])


def _unescape_module(path: str) -> str:
    """The module proxy's case encoding back to the path: !x is X."""
    return re.sub(r"!([a-z])", lambda m: m.group(1).upper(), path)


def failed_modules(errors: list[str]) -> list[str]:
    """The modules (path@version, or a path) named in go's error lines."""
    found: list[str] = []
    for line in errors:
        names = _GO_MODULE.findall(line)
        if not names:
            names = [_unescape_module(p) + (f"@{v}" if v else "") for p, v in _GO_PROXY_PATH.findall(line)]
        found += [n for n in names if n not in found]
    return found


def go_download_failure(exc: Exception) -> str | None:
    """What a failed go command could not download, when the failure was the network's; None otherwise."""
    if not isinstance(exc, GoFailed):
        return None
    if not any(_GO_TRANSIENT.search(e) for e in exc.errors) or any(_GO_PERMANENT.search(e) for e in exc.errors):
        return None
    modules = failed_modules([e for e in exc.errors if _GO_TRANSIENT.search(e)])
    if not modules:
        return "a module download failed"
    return f"could not download module{'s' if len(modules) > 1 else ''} {', '.join(modules)}"


def _go_once(args: list[str], cwd: Path, log: Path, what: str, env: dict[str, str]) -> str:
    res = subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)
    with log.open("a") as fh:
        fh.write(f"$ go {' '.join(args)}  (in {cwd})\n{res.stdout}{res.stderr}\n")
    if res.returncode != 0:
        errors = [line for line in res.stderr.splitlines() if line.strip() and not line.startswith("go: downloading")]
        errors += _json_errors(res.stdout)
        raise GoFailed(f"{what} failed (go {' '.join(args[:2])}): {' | '.join(errors[-6:])} (full log: {log})", errors)
    return res.stdout


def _go(args: list[str], cwd: Path, log: Path, what: str, env: dict[str, str] | None = None) -> str:
    """Run a go command; on failure raise with the exact error lines and where the whole log is.

    A failure to download a module over the network (connection reset or refused, timeout, TLS handshake,
    unexpected EOF, HTTP 5xx or 429 from the proxy) is tried again, GO_RETRY times at most, backing off;
    when the tries run out the error names the module. A real error (unknown revision, 404/410, checksum
    mismatch, a compile error) is raised at once.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    run_env = env or go_env()
    return retry(lambda: _go_once(args, cwd, log, what, run_env), what=what, transient=go_download_failure, policy=GO_RETRY,
                 on_retry=note_retry(log, what))


def staging_replaces(gomod: dict) -> list[str]:
    """The modules a k8s.io/kubernetes go.mod (as `go mod edit -json` prints it) maps to ./staging."""
    found = []
    for rep in gomod.get("Replace") or []:
        new_path = rep["New"]["Path"]
        if new_path.startswith("./staging/"):
            found.append(rep["Old"]["Path"])
    if not found:
        raise LabError("the kubernetes go.mod maps no module to ./staging: the wrapper recipe no longer fits this release")
    return sorted(found)


def staging_version(kubernetes_version: str) -> str:
    """v1.36.3 -> v0.36.3, the tag of the staging modules for that release."""
    m = re.fullmatch(r"v1\.(\d+)\.(\d+)", kubernetes_version)
    if not m:
        raise LabError(f"kubernetes version {kubernetes_version!r} is not of the form v1.<minor>.<patch>")
    return f"v0.{m.group(1)}.{m.group(2)}"


def kubernetes_wrapper_gomod(upstream: dict, version: str) -> str:
    """The wrapper's go.mod: upstream's go and godebug lines, the release, and one replace per staging module."""
    lines = [f"module {WRAPPER_MODULE}/kubernetes", "", f"go {upstream['Go']}", ""]
    godebug = upstream.get("GoDebug") or []
    if godebug:
        lines += [f"godebug {d['Key']}={d['Value']}" for d in godebug] + [""]
    lines += [f"require k8s.io/kubernetes {version}", "", "replace ("]
    stg = staging_version(version)
    lines += [f"\t{mod} => {mod} {stg}" for mod in staging_replaces(upstream)]
    lines += [")", ""]
    return "\n".join(lines)


def version_ldflags(version: str, build_date: str, commit: str) -> str:
    """The -X flags upstream's hack/lib/version.sh sets, so --version and /version report the release."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for key, value in (("gitVersion", version), ("gitMajor", major), ("gitMinor", minor), ("gitCommit", commit),
                           ("gitTreeState", "clean"), ("buildDate", build_date)):
            flags.append(f"-X {pkg}.{key}={value}")
    return " ".join(flags)


def _tools_go(imports: list[str]) -> str:
    return "//go:build tools\n\npackage tools\n\nimport (\n" + "".join(f'\t_ "{i}"\n' for i in imports) + ")\n"


def _empty_dir(path: Path) -> Path:
    """path as a new, empty directory (whatever a failed build left there goes)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _finish(tmp: Path, final: Path) -> Path:
    if final.exists():
        shutil.rmtree(final)
    tmp.replace(final)
    return final


def _check_version(binary: Path, expect: str) -> None:
    res = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    if expect not in res.stdout + res.stderr:
        raise LabError(f"{binary} --version printed {(res.stdout + res.stderr).strip()!r}, expected {expect}")


def _kubernetes_wrapper(log: Path) -> tuple[Path, dict, dict]:
    """The wrapper module of k8s.io/kubernetes at KUBERNETES_VERSION (made afresh), the proxy's answer for the
    release (`go mod download -json`: its Dir, Info) and the release's .info (its commit time and commit)."""
    src = _empty_dir(cluster_cache() / "src" / f"kubernetes-{KUBERNETES_VERSION}")
    info = json.loads(_go(["mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"], src, log,
                          f"fetching k8s.io/kubernetes {KUBERNETES_VERSION}"))
    upstream = json.loads(_go(["mod", "edit", "-json", info["GoMod"]], src, log, "reading the kubernetes go.mod"))
    (src / "go.mod").write_text(kubernetes_wrapper_gomod(upstream, KUBERNETES_VERSION))
    # Every command the lab builds from the release, so one tidy serves each build.
    (src / "tools.go").write_text(_tools_go([f"k8s.io/kubernetes/cmd/{b}" for b in (*KUBE_BINARIES, *NODE_BINARIES)]))
    _go(["mod", "tidy"], src, log, f"resolving kubernetes {KUBERNETES_VERSION}")
    # The proxy's .info has the release's commit time (and, from some proxies, its commit).
    release = json.loads(Path(info["Info"]).read_text())
    return src, info, release


def _build_kubernetes_commands(name: str, binaries: tuple[str, ...], log: Path) -> Path:
    final = _bin_dir(name, KUBERNETES_VERSION)
    if all((final / b).exists() for b in binaries):
        return final
    src, _info, release = _kubernetes_wrapper(log)
    commit = (release.get("Origin") or {}).get("Hash", "")
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    _go(["build", "-trimpath", "-tags", "selinux,notest", "-ldflags", version_ldflags(KUBERNETES_VERSION, release["Time"], commit),
         "-o", str(tmp) + "/", *[f"k8s.io/kubernetes/cmd/{b}" for b in binaries]],
        src, log, f"building {', '.join(binaries)} {KUBERNETES_VERSION}")
    _check_version(tmp / binaries[0], f"Kubernetes {KUBERNETES_VERSION}")
    return _finish(tmp, final)


def build_kubernetes(log: Path) -> Path:
    """The control plane's commands."""
    return _build_kubernetes_commands("kubernetes", KUBE_BINARIES, log)


def build_kubelet(log: Path) -> Path:
    """The kubelet of the lab's real node, from the same release as the control plane (a directory of its own,
    so a control plane already built is not rebuilt)."""
    return _build_kubernetes_commands("kubelet", NODE_BINARIES, log)


def kubernetes_source(log: Path) -> Path:
    """The release's source tree in the module cache (read-only): what the lab builds from besides Go (the pause
    container's C source)."""
    where = cluster_cache()
    where.mkdir(parents=True, exist_ok=True)
    info = json.loads(_go(["mod", "download", "-json", f"k8s.io/kubernetes@{KUBERNETES_VERSION}"], where, log,
                          f"fetching k8s.io/kubernetes {KUBERNETES_VERSION}"))
    return Path(info["Dir"])


def build_in_wrapper(src: Path, module: str, version: str, package: str, binary: Path, log: Path, *,
                     go: str = "1.25", tags: str = "", go_sum: Path | None = None, env: dict[str, str] | None = None,
                     ldflags: str = "-s -w", more: dict[str, Path] | None = None) -> None:
    """Build one package of a module through a wrapper module of ours, in src (made empty), into binary.

    For modules whose replace or exclude directives stop `go install pkg@version`, or whose package path this
    proxy refuses to look up as a module of its own. go_sum seeds the wrapper's go.sum (the module's own hashes,
    for dependencies the checksum database here does not serve). more: further packages of the module and their
    binaries, built in the same wrapper.
    """
    name = src.name
    _empty_dir(src)
    (src / "go.mod").write_text(f"module {WRAPPER_MODULE}/{name}\n\ngo {go}\n\nrequire {module} {version}\n")
    if go_sum is not None:
        shutil.copyfile(go_sum, src / "go.sum")
    builds = {package: binary, **(more or {})}
    (src / "tools.go").write_text(_tools_go(list(builds)))
    _go(["mod", "tidy"], src, log, f"resolving {name}", env=env)
    for pkg, out in builds.items():
        _go(["build", "-trimpath", *(["-tags", tags] if tags else []), "-ldflags", ldflags, "-o", str(out), pkg],
            src, log, f"building {name} ({pkg.rsplit('/', 1)[-1]})", env=env)


def build_etcd(log: Path) -> Path:
    final = _bin_dir("etcd", ETCD_VERSION)
    if (final / "etcd").exists():
        return final
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    build_in_wrapper(cluster_cache() / "src" / f"etcd-{ETCD_VERSION}", "go.etcd.io/etcd/server/v3", ETCD_VERSION,
                     "go.etcd.io/etcd/server/v3", tmp / "etcd", log)
    _check_version(tmp / "etcd", f"etcd Version: {ETCD_VERSION.lstrip('v')}")
    return _finish(tmp, final)


def build_kwok(log: Path) -> Path:
    final = _bin_dir("kwok", KWOK_VERSION)
    if (final / "kwok").exists() and (final / "kwokctl").exists():
        return final
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    env = {**go_env(), "GOBIN": str(tmp)}
    _go(["install", "-trimpath", "-ldflags", "-s -w",
         f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}", f"sigs.k8s.io/kwok/cmd/kwokctl@{KWOK_VERSION}"],
        tmp, log, f"installing kwok {KWOK_VERSION}", env=env)
    return _finish(tmp, final)


def nfd_wrapper_gomod(upstream: dict, version: str) -> str:
    """The wrapper's go.mod for nfd-master: the release and upstream's replace directives, its one local
    replace (./api/nfd, a module of the same repository) mapped to that module at the release's tag."""
    lines = [f"module {WRAPPER_MODULE}/nfd", "", f"go {upstream['Go']}", "", f"require {NFD_MODULE} {version}", "", "replace ("]
    for rep in upstream.get("Replace") or []:
        old, new = rep["Old"], rep["New"]
        if new["Path"].startswith("./"):
            sub = new["Path"][2:].rstrip("/")
            if old["Path"] != f"{NFD_MODULE}/{sub}":
                raise LabError(f"the NFD go.mod replaces {old['Path']} with {new['Path']}: the wrapper recipe no longer fits this release")
            new = {"Path": old["Path"], "Version": version}
        left = old["Path"] + (f" {old['Version']}" if old.get("Version") else "")
        lines.append(f"\t{left} => {new['Path']} {new['Version']}")
    lines += [")", ""]
    return "\n".join(lines)


def build_nfd(log: Path) -> Path:
    final = _bin_dir("nfd", NFD_VERSION)
    if (final / "nfd-master").exists() and (final / "nfd-api-crds.yaml").exists():
        return final
    src = _empty_dir(cluster_cache() / "src" / f"nfd-{NFD_VERSION}")
    info = json.loads(_go(["mod", "download", "-json", f"{NFD_MODULE}@{NFD_VERSION}"], src, log, f"fetching NFD {NFD_VERSION}"))
    upstream = json.loads(_go(["mod", "edit", "-json", info["GoMod"]], src, log, "reading the NFD go.mod"))
    (src / "go.mod").write_text(nfd_wrapper_gomod(upstream, NFD_VERSION))
    shutil.copyfile(Path(info["Dir"]) / "go.sum", src / "go.sum")
    (src / "go.sum").chmod(0o644)
    (src / "tools.go").write_text(_tools_go([f"{NFD_MODULE}/cmd/nfd-master"]))
    _go(["mod", "tidy"], src, log, f"resolving NFD {NFD_VERSION}")
    tmp = _empty_dir(final.with_name(final.name + ".tmp"))
    _go(["build", "-trimpath", "-ldflags", f"-s -w -X {NFD_MODULE}/pkg/version.version={NFD_VERSION}",
         "-o", str(tmp / "nfd-master"), f"{NFD_MODULE}/cmd/nfd-master"], src, log, f"building nfd-master {NFD_VERSION}")
    shutil.copyfile(Path(info["Dir"]) / NFD_CRDS, tmp / "nfd-api-crds.yaml")
    return _finish(tmp, final)


def ensure_toolchain(progress=print) -> Toolchain:
    """Build (or find) every binary the lab cluster runs.

    One builder at a time on this host: each build writes a fixed `<name>.tmp` directory, so two at once (a `lab cluster
    up` while `make caches` builds) emptied each other's (seen: nfd-api-crds.yaml gone from under the copy). The second
    waits, then finds the binaries the first built."""
    log = cluster_cache() / "logs" / f"build-{time.strftime('%Y%m%d-%H%M%S')}.log"
    dirs = {}
    with host_lock("cluster-build"):
        for name, build in (("kubernetes", build_kubernetes), ("etcd", build_etcd), ("kwok", build_kwok), ("nfd", build_nfd)):
            t0 = time.monotonic()
            dirs[name] = build(log)
            took = time.monotonic() - t0
            if took > 1:
                progress(f"lab cluster: built {name} in {took:.0f}s ({dirs[name]})")
    k8s, etcd, kwok, nfd = dirs["kubernetes"], dirs["etcd"], dirs["kwok"], dirs["nfd"]
    return Toolchain(k8s / "kube-apiserver", k8s / "kube-controller-manager", k8s / "kube-scheduler",
                     etcd / "etcd", kwok / "kwok", kwok / "kwokctl", nfd / "nfd-master", nfd / "nfd-api-crds.yaml")

"""One-layer OCI image archives, written without a registry or a container engine.

The lab's real node runs images the lab built itself (the pause container, NVIDIA's device plugin and GFD from
their Go module); `ctr -n k8s.io images import` loads such an archive under the name in its index, so the pod
specs of the roles, which name NVIDIA's registry, run them unchanged.

An archive is an OCI image layout in a tar: `oci-layout`, `index.json` (one manifest, named by the
`io.containerd.image.name` and `org.opencontainers.image.ref.name` annotations), and under `blobs/sha256/` the
manifest, the image config and one gzip-compressed layer. Every entry has mtime 0, owner root, so the same files
give the same digests.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import LabError

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class File:
    """A file of the layer: its content (bytes, or a host file to copy), its mode; a symlink when link is set."""

    data: bytes | Path = b""
    mode: int = 0o644
    link: str = ""


def _info(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
    return info


def layer_tar(files: dict[str, File]) -> bytes:
    """The uncompressed layer: each path's parent directories (0755), then the files, in path order."""
    for path in files:
        if not path.startswith("/") or ".." in PurePosixPath(path).parts:
            raise LabError(f"image file {path!r}: give an absolute path without '..'")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(parent).lstrip("/") for path in files for parent in PurePosixPath(path).parents if str(parent) != "/"})
        for name in dirs:
            tar.addfile(_info(name, tarfile.DIRTYPE, 0o755))
        for path in sorted(files):
            f = files[path]
            name = path.lstrip("/")
            if f.link:
                tar.addfile(_info(name, tarfile.SYMTYPE, 0o777, link=f.link))
                continue
            data = f.data.read_bytes() if isinstance(f.data, Path) else f.data
            tar.addfile(_info(name, tarfile.REGTYPE, f.mode, len(data)), io.BytesIO(data))
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    tar.addfile(_info(f"blobs/sha256/{digest[7:]}", tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return digest


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_archive(dest: Path, name: str, files: dict[str, File], entrypoint: list[str] | None = None,
                  env: dict[str, str] | None = None) -> Path:
    """Write the image `name` (repository:tag) with files as its one layer to dest (an OCI archive); return dest."""
    repo, sep, tag = name.rpartition(":")
    if not sep or not repo or "/" in tag:
        raise LabError(f"image name {name!r}: give repository:tag")
    raw = layer_tar(files)
    layer = gzip.compress(raw, mtime=0)
    config = _json({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint or [], "Env": [f"{k}={v}" for k, v in (env or {}).items()]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
    })
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        layer_digest, config_digest = _blob(tar, layer), _blob(tar, config)
        manifest = _json({
            "schemaVersion": 2, "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": LAYER, "digest": layer_digest, "size": len(layer)}],
        })
        manifest_digest = _blob(tar, manifest)
        index = _json({
            "schemaVersion": 2, "mediaType": INDEX,
            "manifests": [{"mediaType": MANIFEST, "digest": manifest_digest, "size": len(manifest),
                           "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}}],
        })
        for entry, data in (("oci-layout", _json({"imageLayoutVersion": "1.0.0"})), ("index.json", index)):
            tar.addfile(_info(entry, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    tmp.replace(dest)
    return dest


def shared_libraries(binary: Path) -> dict[str, File]:
    """What a dynamically linked binary loads (ldd's paths, the loader among them), as layer files at the same
    paths: a cgo binary runs in an image with nothing else in it. Empty for a static binary."""
    res = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    if res.returncode != 0 and "not a dynamic executable" in res.stdout + res.stderr:
        return {}
    if res.returncode != 0:
        raise LabError(f"ldd {binary} failed: {(res.stdout + res.stderr).strip()}")
    return {path: File(Path(path).resolve(), 0o755) for path in ldd_paths(res.stdout)}


def ldd_paths(text: str) -> list[str]:
    """The library paths in ldd's output ('name => /path (addr)' and the loader's '/path (addr)'); a library ldd
    could not find is an error."""
    paths = []
    for line in text.splitlines():
        line = line.strip()
        if "=> not found" in line:
            raise LabError(f"a library the binary needs is not on this host: {line}")
        target = line.split("=>", 1)[1] if "=>" in line else line
        path = target.strip().split(" (", 1)[0].strip()
        if path.startswith("/"):
            paths.append(path)
    return paths

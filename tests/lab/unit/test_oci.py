"""The one-layer OCI archives the lab's real node imports (lab/oci.py): a layout an importer can follow, byte for byte
reproducible, with what a cgo binary needs beside it."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.oci import File, ldd_paths, shared_libraries, write_archive


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()}  # type: ignore[union-attr]


def blob(entries: dict[str, bytes], digest: str) -> bytes:
    data = entries[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def read_image(archive: Path) -> tuple[dict, dict, dict, tarfile.TarFile]:
    """index, manifest, config and the layer of an archive, each found the way an importer finds it."""
    entries = members(archive)
    assert json.loads(entries["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(entries["index.json"])
    (desc,) = index["manifests"]
    manifest_bytes = blob(entries, desc["digest"])
    assert desc["size"] == len(manifest_bytes)
    manifest = json.loads(manifest_bytes)
    config_bytes = blob(entries, manifest["config"]["digest"])
    assert manifest["config"]["size"] == len(config_bytes)
    config = json.loads(config_bytes)
    (layer_desc,) = manifest["layers"]
    layer = blob(entries, layer_desc["digest"])
    assert layer_desc["size"] == len(layer)
    raw = gzip.decompress(layer)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(raw).hexdigest()]
    return index, manifest, config, tarfile.open(fileobj=io.BytesIO(raw))


def test_an_archive_an_importer_can_follow(tmp_path):
    exe = tmp_path / "tool"
    exe.write_bytes(b"\x7fELF...")
    archive = write_archive(tmp_path / "img.tar", "nvcr.io/nvidia/k8s-device-plugin:v0.19.3",
                            {"/usr/bin/tool": File(exe, 0o755), "/etc/motd": File(b"hi\n"), "/lib64/ld.so": File(link="../lib/ld.so")},
                            entrypoint=["tool"], env={"NVIDIA_VISIBLE_DEVICES": "all"})
    index, manifest, config, layer = read_image(archive)
    annotations = index["manifests"][0]["annotations"]
    assert annotations == {"io.containerd.image.name": "nvcr.io/nvidia/k8s-device-plugin:v0.19.3",
                           "org.opencontainers.image.ref.name": "v0.19.3"}
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert config["config"] == {"Entrypoint": ["tool"], "Env": ["NVIDIA_VISIBLE_DEVICES=all"]}
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    got = {m.name: m for m in layer.getmembers()}
    assert sorted(got) == ["etc", "etc/motd", "lib64", "lib64/ld.so", "usr", "usr/bin", "usr/bin/tool"]
    assert got["usr/bin"].isdir() and got["usr/bin"].mode == 0o755
    assert got["usr/bin/tool"].mode == 0o755 and layer.extractfile("usr/bin/tool").read() == b"\x7fELF..."  # type: ignore[union-attr]
    assert got["etc/motd"].mode == 0o644
    assert got["lib64/ld.so"].issym() and got["lib64/ld.so"].linkname == "../lib/ld.so"
    assert {(m.uid, m.gid, m.mtime) for m in got.values()} == {(0, 0, 0)}


def test_the_same_files_give_the_same_archive(tmp_path):
    files = {"/pause": File(b"\x00" * 100, 0o755)}
    a = write_archive(tmp_path / "a.tar", "registry.k8s.io/pause:3.10.2", files, entrypoint=["/pause"])
    b = write_archive(tmp_path / "b.tar", "registry.k8s.io/pause:3.10.2", files, entrypoint=["/pause"])
    assert a.read_bytes() == b.read_bytes()
    assert not (tmp_path / "a.tar.tmp").exists()


@pytest.mark.parametrize(("name", "files", "message"), [
    ("pause", {"/p": File()}, r"image name 'pause': give repository:tag"),
    ("localhost:5000/pause", {"/p": File()}, r"give repository:tag"),
    ("x/pause:1", {"p": File()}, r"image file 'p': give an absolute path"),
    ("x/pause:1", {"/a/../p": File()}, r"image file '/a/../p': give an absolute path without '..'"),
])
def test_bad_images_are_named(name, files, message, tmp_path):
    with pytest.raises(LabError, match=message):
        write_archive(tmp_path / "x.tar", name, files)


LDD = """\tlinux-vdso.so.1 (0x00007ffd1a3f2000)
\tlibresolv.so.2 => /lib/x86_64-linux-gnu/libresolv.so.2 (0x00007f1c2a5e0000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1c2a3ff000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f1c2a61d000)
"""


def test_ldd_paths_are_the_libraries_and_the_loader():
    assert ldd_paths(LDD) == ["/lib/x86_64-linux-gnu/libresolv.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]


def test_a_library_ldd_cannot_find_is_named():
    with pytest.raises(LabError, match=r"not on this host: libnvidia-ml.so.1 => not found"):
        ldd_paths("\tlibnvidia-ml.so.1 => not found\n" + LDD)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_dynamic_binary_brings_its_libraries_and_a_static_one_none(tmp_path):
    src = tmp_path / "m.c"
    src.write_text("int main(void) { return 0; }\n")
    subprocess.run(["gcc", "-o", str(tmp_path / "dyn"), str(src)], check=True)
    libs = shared_libraries(tmp_path / "dyn")
    assert any(p.endswith("/libc.so.6") for p in libs) and any("ld-linux" in p for p in libs)
    assert all(isinstance(f.data, Path) and f.data.is_file() for f in libs.values())  # links resolved: the file itself
    subprocess.run(["gcc", "-static", "-o", str(tmp_path / "static"), str(src)], check=True)
    assert shared_libraries(tmp_path / "static") == {}

"""Print, as JSON, the nvidia runtime and CDI settings of the runtime's effective config for a config file:
what `containerd --config FILE config dump` says (containerd's own merge of the file and its imports), or
with --crio FILE DIR what `crio --config FILE --config-dir DIR config` says (its runtimes and NRI).
Run on a lab machine by the runtime scenario's verify, with the python3-tomlkit the role installed."""

import json
import re
import subprocess
import sys

import tomlkit


def plain(value):
    """tomlkit items as plain values (tomlkit 0.9, on Ubuntu 22.04, has no unwrap())."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if type(value).__name__ == "Bool":
        return bool(value.value)
    for kind in (bool, str, int, float):
        if isinstance(value, kind):
            return kind(value)
    return value


def containerd(config):
    cmd = ["containerd", "--config", config, "config", "dump"]
    dump = plain(tomlkit.parse(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
    plugins = dump.get("plugins", {})
    cri = plugins.get("io.containerd.cri.v1.runtime") or plugins.get("io.containerd.grpc.v1.cri") or {}
    images = plugins.get("io.containerd.cri.v1.images") or cri
    runtimes = cri.get("containerd", {}).get("runtimes", {})
    return {
        "version": dump.get("version"),
        "nvidia": runtimes.get("nvidia"),
        "runtimes": sorted(runtimes),
        "default_runtime_name": cri.get("containerd", {}).get("default_runtime_name"),
        "enable_cdi": cri.get("enable_cdi", False),
        "registry_config_path": images.get("registry", {}).get("config_path"),
    }


def crio_nri(text, section):
    """[crio.nri]'s enable_nri and nri_listen. `crio config` comments out each value equal to CRI-O's default
    ("# enable_nri = true"): such a line is read as its value where the section has no uncommented one."""
    nri = {k: section[k] for k in ("enable_nri", "nri_listen") if k in section}
    found = re.search(r"^\[crio\.nri\]\n(.*?)(?=^\[)", text + "\n[end]", re.S | re.M)
    for line in (found.group(1) if found else "").splitlines():
        commented = re.match(r"^#\s*(enable_nri|nri_listen)\s*=\s*(.+)$", line)
        if commented and commented.group(1) not in nri:
            nri.update(plain(tomlkit.parse(f"{commented.group(1)} = {commented.group(2)}")))
    return nri


def crio(config, config_dir):
    cmd = ["crio", "--config", config, "--config-dir", config_dir, "config"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    dump = plain(tomlkit.parse(text))
    runtime = dump.get("crio", {}).get("runtime", {})
    runtimes = runtime.get("runtimes", {})
    return {
        "nvidia": runtimes.get("nvidia"),
        "runtimes": sorted(runtimes),
        "default_runtime": runtime.get("default_runtime"),
        "pause_image": dump.get("crio", {}).get("image", {}).get("pause_image"),
        "nri": crio_nri(text, dump.get("crio", {}).get("nri", {})),
    }


if __name__ == "__main__":
    view = crio(sys.argv[2], sys.argv[3]) if sys.argv[1] == "--crio" else containerd(sys.argv[1])
    print(json.dumps(view, sort_keys=True))

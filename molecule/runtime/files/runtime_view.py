"""Print, as JSON, the nvidia runtime and CDI settings of the runtime's effective config for a config file:
what `containerd --config FILE config dump` says (containerd's own merge of the file and its imports), or
with --crio FILE DIR what `crio --config FILE --config-dir DIR config` says.
Run on a lab machine by the runtime scenario's verify, with the python3-tomlkit the role installed."""

import json
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


def crio(config, config_dir):
    cmd = ["crio", "--config", config, "--config-dir", config_dir, "config"]
    dump = plain(tomlkit.parse(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
    runtime = dump.get("crio", {}).get("runtime", {})
    runtimes = runtime.get("runtimes", {})
    return {
        "nvidia": runtimes.get("nvidia"),
        "runtimes": sorted(runtimes),
        "default_runtime": runtime.get("default_runtime"),
        "pause_image": dump.get("crio", {}).get("image", {}).get("pause_image"),
    }


if __name__ == "__main__":
    view = crio(sys.argv[2], sys.argv[3]) if sys.argv[1] == "--crio" else containerd(sys.argv[1])
    print(json.dumps(view, sort_keys=True))

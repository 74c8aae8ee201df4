"""gpu_info's real answer for a hardware profile, read on this machine from the profile's simulated hardware.

The cluster roles take each node's facts from `hostvars[<node>].gpuops_gpu_info`, which `node.yml` (or
the first play of `cluster.yml`) sets by running `gpuops.nvidia.gpu_info` on the node. A scale test has a
thousand KWOK nodes and no machines behind them, so it gives each host the facts the module returns for
that host's profile: the profile's hardware tree is written here, under the cache, and the module's own
code reads it with the lab's NVML library, in a child process per profile (an NVML library is loaded
once per process). Nothing is typed in by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .distros import DISTROS
from .images import cache_dir
from .sim.hardware import build_fake_nvml, load_profile, write_hardware

REPO = Path(__file__).resolve().parents[1]

_READ = """
import json, sys
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect
root, lib = sys.argv[1], sys.argv[2]
print(json.dumps(collect(root, lib or None)))
"""


def profile_facts(profile_name: str, machine: str, collections_path: str | None = None) -> dict:
    """The gpuops_gpu_info fact a machine of this profile reports (its uuids derive from `machine`)."""
    profile = load_profile(profile_name)
    nvml = build_fake_nvml(cache_dir()) if profile.get("gpus") else None
    dest = cache_dir() / "facts" / f"{profile_name}-{machine}"
    write_hardware(profile, dest, machine, os.uname().release, nvml)
    lib = dest / "nvml/libnvidia-ml.so.1"
    env = dict(os.environ)
    path = collections_path or env.get("ANSIBLE_COLLECTIONS_PATH") or str(REPO / ".build/collections")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, "-c", _READ, str(dest), str(lib) if lib.exists() else ""],
                         capture_output=True, text=True, check=True, env=env, timeout=60)
    return json.loads(out.stdout)


def node_facts(facts: dict, distro: str | None = None, kernel: str | None = None) -> dict:
    """A profile's facts as a node of this distribution (os-release's ID and VERSION_ID) and running kernel reports them."""
    if not distro and not kernel:
        return facts
    node = dict(facts["node"])
    if distro:
        found = DISTROS[distro]
        node["os"] = {"id": found.family, "version_id": found.version}
    if kernel:
        node["kernel"] = {**node["kernel"], "running": kernel}
    return {**facts, "node": node}


def cluster_inventory(nodes: list[tuple[str, ...]], group_vars: dict | None = None, host_vars: dict | None = None) -> dict:
    """An inventory of the given (node name, profile[, distribution[, kernel]]) hosts in gpu_nodes, each with its
    profile's facts (as a node of that distribution and kernel reports them, where given: lab/cluster.py's NodeSpec).

    Facts are read once per profile (a host's GPU uuids then repeat across hosts of a profile, which nothing
    on the cluster side reads); hosts are never connected to: every task on them is skipped.
    """
    facts = {}
    hosts = {}
    for name, profile, *rest in nodes:
        if profile not in facts:
            facts[profile] = profile_facts(profile, f"lab-{profile}")
        info = node_facts(facts[profile], *rest)
        hosts[name] = {"ansible_connection": "local", "gpuops_gpu_info": info, **(host_vars or {}).get(name, {})}
    return {"all": {"vars": group_vars or {}, "children": {"gpu_nodes": {"hosts": hosts}}}}


# Written by Ansible's own jsonfile cache plugin (its format is Ansible's to choose), in a child process so this one
# never loads Ansible's plugins.
_WRITE_CACHE = """
import json, sys
from ansible.plugins.loader import cache_loader, init_plugin_loader
init_plugin_loader()
cache = cache_loader.get("ansible.builtin.jsonfile")
for host, facts in json.load(sys.stdin).items():
    cache.set(host, facts)
"""


def fact_cache_env(directory: Path) -> dict[str, str]:
    """The settings that point ansible-playbook at a jsonfile fact cache in `directory` (docs/cluster.md's)."""
    return {"ANSIBLE_CACHE_PLUGIN": "ansible.builtin.jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(directory),
            "ANSIBLE_CACHE_PLUGIN_TIMEOUT": "86400"}


def move_facts_to_cache(inventory: dict, directory: Path) -> dict:
    """Move the inventory's hosts' gpuops_gpu_info into a jsonfile fact cache in `directory`, where node.yml leaves them
    for a later cluster.yml (the preflight role sets them cacheable), and return the inventory without them. A thousand
    hosts' facts in the inventory file itself would cost ansible-playbook about 25 s of parsing at every start, which no
    real setup pays."""
    hosts = inventory["all"]["children"]["gpu_nodes"]["hosts"]
    facts = {name: {"gpuops_gpu_info": hv.pop("gpuops_gpu_info")} for name, hv in hosts.items() if "gpuops_gpu_info" in hv}
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", _WRITE_CACHE], input=json.dumps(facts), text=True, check=True,
                   env={**os.environ, **fact_cache_env(directory)}, timeout=300)
    return inventory


# The MIG config the a100-pcie-mig profile's GPUs are in (GPU 0 split as all-balanced splits an A100 80GB,
# GPU 1 whole): a lab inventory names it for that profile's host, so the lab's MIG manager applying it
# leaves the layout the host's facts show.
A100_PROFILE_MIG_CONFIG = {"lab-a100-gpu0-balanced": [
    {"devices": [0], "device-filter": ["0x20B510DE"], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
    {"devices": [1], "device-filter": ["0x20B510DE"], "mig-enabled": False},
]}
# The MIG config a profile's GPUs are in. An inventory of lab hosts carries it and each such host names it, so the lab
# cluster's MIG manager applies the layout the host's fake NVML reports. Without it the MIG manager would apply the
# default (all-disabled) to the Node while the facts, which no MIG manager changes, keep showing MIG devices: every
# later cluster.yml would expect them and fail.
PROFILE_MIG_CONFIGS = {"a100-pcie-mig": A100_PROFILE_MIG_CONFIG}


def profile_mig_config(profile: str | None) -> str | None:
    """The name of the MIG config a host of this profile names (gpuops_mig_manager_config), None for other profiles."""
    return next(iter(PROFILE_MIG_CONFIGS[profile])) if profile in PROFILE_MIG_CONFIGS else None


def profile_mig_configs(profiles) -> dict:
    """The MIG configs (gpuops_mig_manager_configs) an inventory of hosts of these profiles carries."""
    return {name: config for profile in set(profiles) for name, config in PROFILE_MIG_CONFIGS.get(profile or "", {}).items()}

"""The Ansible inventory the lab writes for its machines."""

from __future__ import annotations

from pathlib import Path

import yaml

from .facts import profile_mig_config, profile_mig_configs
from .machines import Machine, ssh_option_args
from .sim.hardware import HW_PATH, NVML_LIBRARY, load_profile

GROUP = "gpu_nodes"


def render_inventory(machines: dict[str, Machine], key: Path) -> dict:
    """Inventory data: every machine in group gpu_nodes, reached over SSH on loopback as root."""
    hosts = {m.name: host_vars(m) for m in sorted(machines.values(), key=lambda m: m.name)}
    mig_configs = profile_mig_configs(m.profile for m in machines.values())
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key),
                "ansible_ssh_common_args": " ".join(ssh_option_args()),
                "ansible_python_interpreter": "/usr/bin/python3",
                **({"gpuops_mig_manager_configs": mig_configs} if mig_configs else {}),
            },
            "children": {GROUP: {"hosts": hosts}},
        }
    }


def host_vars(machine: Machine) -> dict:
    """How Ansible reaches the machine and, with a hardware profile, where the roles read its hardware."""
    found = {"ansible_host": "127.0.0.1", "ansible_port": machine.port, "gpuops_lab_distro": machine.distro}
    if machine.profile:
        found.update({
            "gpuops_lab_profile": machine.profile,
            "gpuops_preflight_hardware_root": HW_PATH,
            "gpuops_preflight_nvml_library": NVML_LIBRARY,
        })
        gpus = load_profile(machine.profile).get("gpus") or {}
        if any(gpus.get("mig_devices") or []):
            # nvidia-ctk reads MIG devices' capability files from the real /proc/driver/nvidia-caps, which a
            # lab machine cannot simulate: the CDI spec is not generated on machines with MIG devices.
            found["gpuops_container_toolkit_cdi_spec"] = False
        mig_config = profile_mig_config(machine.profile)
        if mig_config:
            found["gpuops_mig_manager_config"] = mig_config
    return found


def write_inventory(path: Path, machines: dict[str, Machine], key: Path) -> None:
    """Write the inventory atomically; the header says it is generated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(render_inventory(machines, key), sort_keys=False, default_flow_style=False)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("---\n# Written by 'python -m lab up'; removed by 'lab down'. Do not edit.\n" + body)
    tmp.replace(path)

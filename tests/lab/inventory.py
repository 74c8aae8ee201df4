"""The Ansible inventory the lab writes for its machines."""

from __future__ import annotations

from pathlib import Path

import yaml

from .machines import Machine, ssh_option_args

GROUP = "gpu_nodes"


def render_inventory(machines: dict[str, Machine], key: Path) -> dict:
    """Inventory data: every machine in group gpu_nodes, reached over SSH on loopback as root."""
    hosts = {
        m.name: {
            "ansible_host": "127.0.0.1",
            "ansible_port": m.port,
            "gpuops_lab_distro": m.distro,
        }
        for m in sorted(machines.values(), key=lambda m: m.name)
    }
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key),
                "ansible_ssh_common_args": " ".join(ssh_option_args()),
                "ansible_python_interpreter": "/usr/bin/python3",
            },
            "children": {GROUP: {"hosts": hosts}},
        }
    }


def write_inventory(path: Path, machines: dict[str, Machine], key: Path) -> None:
    """Write the inventory atomically; the header says it is generated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(render_inventory(machines, key), sort_keys=False, default_flow_style=False)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("---\n# Written by 'python -m tests.lab up'; removed by 'lab down'. Do not edit.\n" + body)
    tmp.replace(path)

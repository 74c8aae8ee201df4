#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_manager_info
short_description: Plan Fabric Manager, the NVLink Subnet Manager or IMEX for a node, at exactly the driver's version
version_added: 0.1.0
description:
  - Decides from the hardware facts of M(gpuops.nvidia.gpu_info) what the node runs for its NVLink fabric - nothing
    (PCIe and boards without NVSwitch), Fabric Manager (NVSwitches on the PCI bus, NVLink4 and older), Fabric Manager
    with the NVLink Subnet Manager (NVLink5 boards, whose switch management bridges carry C(SW_MNG) in their VPD), or
    IMEX (GB200/GB300 NVL compute trays) - and names the packages at exactly the driver's version.
  - Reads the package database (C(dpkg-query) or C(rpm)) and every version the repositories offer (C(apt-cache policy)
    or C(dnf repoquery)).
  - Fails, naming the variable, on an unknown mode, a driver version that is not one, a repository without the packages
    at that version (listing the versions it found), and a O(config) key or value C(fabricmanager.cfg) does not take.
  - Says whether the daemon may start now (RV(start)), which is only when the loaded driver has exactly the version.
  - Never changes anything; always returns C(changed=false).
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  repository:
    description: Where the driver comes from, C(distro) (Canonical's archive) or C(cuda) (NVIDIA's CUDA repository).
    type: str
    choices: [distro, cuda]
    default: distro
  mode:
    description: C(auto) follows the hardware (C(derived.fabric_manager.mode) of O(gpu_info)); the others force it.
    type: str
    choices: [auto, none, fabricmanager, nvlsm, imex]
    default: auto
  driver_version:
    description: The driver's version (C(580.178.04)); the packages are planned at exactly this version.
    type: str
    default: ""
  version_variable:
    description: The variable O(driver_version) came from, named in the messages.
    type: str
    default: gpuops_fabric_manager_driver_version
  config:
    description: C(fabricmanager.cfg) settings to check (keys as in the file).
    type: dict
    default: {}
  image_build:
    description: Whether the root is an image being built (nothing may start).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.node_plan
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
  - gpuops.nvidia.attributes.info_module
attributes:
  check_mode:
    details:
      - It only reads (the package database, C(apt-cache policy)), so it runs the same in check mode.
"""

EXAMPLES = r"""
- name: Plan the fabric manager at the installed driver's version
  gpuops.nvidia.fabric_manager_info:
    gpu_info: "{{ gpuops_gpu_info }}"
    distribution: "{{ ansible_facts.distribution }}"
    major_version: "{{ ansible_facts.distribution_major_version }}"
    driver_version: "{{ gpuops_driver.version }}"
    version_variable: gpuops_driver.version
  register: fm
"""

RETURN = r"""
plan:
  description:
    - C(mode) and C(reason) (what the node runs and why), C(service), C(version) (the driver's), C(names) and
      C(packages) (install specs pinned to the version), C(install) (something to install or replace), C(unhold) and
      C(remove) (packages of another branch or version in the way), C(not_held) (ours, installed, not held yet),
      C(installed) (the family's packages found) and C(config) (the checked settings, as text).
  returned: success
  type: dict
  sample:
    mode: fabricmanager
    reason: 4 NVSwitch device(s) on the PCI bus
    family: ubuntu
    version: 580.178.04
    service: nvidia-fabricmanager.service
    names: [nvidia-fabricmanager-580, libnvidia-nscq-580]
    packages: [nvidia-fabricmanager-580=580.178.04-0ubuntu0.24.04.1, libnvidia-nscq-580=580.178.04-0ubuntu0.24.04.1]
    install: true
    unhold: []
    remove: []
    not_held: []
    installed: {}
    config: {FABRIC_MODE: "0"}
start:
  description: Whether the daemon may start now (the loaded driver has exactly the version, and this is no image build).
  returned: success
  type: bool
start_reason:
  description: Why it may, or may not, start now.
  returned: success
  type: str
service:
  description:
    - The state of the plan's service, as M(gpuops.nvidia.node_files) judges it - C(enabled) (C(null) where the node has
      no such unit yet) and C(active); the role leaves its service call out where that would change nothing. Empty
      with nothing to run.
  returned: success
  type: dict
  sample: {enabled: true, active: true}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.fabric_manager_run import ARGUMENT_SPEC, run


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run(module, module.params)
    except PlanError as exc:
        module.fail_json(msg=str(exc), variable=exc.variable)
    except (RuntimeError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()

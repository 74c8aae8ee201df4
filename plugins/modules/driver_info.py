#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: driver_info
short_description: Plan the NVIDIA driver install for a node, and read the driver it already has
version_added: 0.1.0
description:
  - Decides, from the hardware facts of M(gpuops.nvidia.gpu_info) and the request, what the driver role installs
    and refuses what cannot work, before anything on the host changes.
  - Reads the package database (C(dpkg-query) or C(rpm)), the candidate versions (C(apt-cache policy)), the
    kernels installed under C(/lib/modules) and the flavour of the installed C(nvidia) module (C(modinfo)).
  - Fails, naming the variable, on an unknown branch, a branch without packages for the distribution (or whose
    packages are transitional ones of another branch), a kernel module flavour the GPUs cannot run, a method the
    source cannot serve, a change of the installed branch not allowed by O(allow_branch_change), and a host
    driver on a node set for the containerized driver (or the other way round).
  - Never changes anything; always returns C(changed=false).
author:
  - gpuops.nvidia maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.node_plan
  - gpuops.nvidia.driver_request
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
  - gpuops.nvidia.attributes.info_module
attributes:
  check_mode:
    details:
      - It only reads (the package database, C(apt-cache policy), C(modinfo), C(/lib/modules)), so it runs the same in
        check mode.
"""

EXAMPLES = r"""
- name: Plan the driver
  gpuops.nvidia.driver_info:
    gpu_info: "{{ gpuops_gpu_info }}"
    distribution: "{{ ansible_facts.distribution }}"
    major_version: "{{ ansible_facts.distribution_major_version }}"
    branch: "580"
  register: plan
"""

RETURN = r"""
plan:
  description:
    - What the driver role installs, with the same keys for every method and package source.
    - With O(method=containerized) only C(family), C(repository), C(method), C(image_build) and C(modprobe_options) are
      set, and C(remove) and C(unhold) where a host driver is to go (O(remove_host_driver)); with O(offline=true) the
      packages are not planned (C(packages) is empty, C(install) false).
    - C(cuda_repo) is set for the CUDA repository, C(rhel) (module stream, packages, versionlock) on the RHEL family;
      C(warnings) says why the plan differs from the request (Debian's open modules lagging its userspace).
    - C(boot_kernel) is the newest installed kernel when the node boots it next and it is not C(kernel) (a kernel
      update waiting for its reboot); C(packages) then also holds that kernel's headers or precompiled modules, so the
      module is there before the reboot. The plan is refused when the repository lacks them.
  returned: success
  type: dict
  sample:
    family: ubuntu
    repository: distro
    method: precompiled
    image_build: false
    branch: 580
    module_type: open
    module_type_reason: Hopper GPUs support the open modules, NVIDIA's default
    kernel: 6.8.0-151-generic
    kernel_reason: the running kernel
    boot_kernel: null
    packages: [nvidia-headless-no-dkms-580-server-open, nvidia-utils-580-server, linux-modules-nvidia-580-server-open-6.8.0-151-generic]
    install: true
    unhold: []
    remove: []
    cuda_repo: null
    rhel: null
    warnings: []
    modprobe_options: ""
installed:
  description:
    - The driver the package database holds (packages, those providing the kernel module, version, branch, held and not
      held packages, packages of another branch) and the flavour of its module for the planned kernel (C(null) when
      not read); C(module_types) has the flavour for each planned kernel (C(kernel) and C(boot_kernel)), C(null) for
      one without the module.
    - C(persistenced_user) is the user nvidia-persistenced's own unit runs it as (C(root) when the unit names none),
      C(null) when the node has no such unit.
  returned: success
  type: dict
  sample: {packages: [], modules: [], version: null, branch: null, held: [], not_held: [], stray: [], module_type: null, module_types: {},
           persistenced_user: nvidia-persistenced}
candidates:
  description: The candidate version of each planned package (C(null) where the package lists have none); empty when no package was planned.
  returned: success
  type: dict
  sample: {nvidia-headless-no-dkms-580-server-open: 580.178.04-0ubuntu0.24.04.1, nvidia-utils-580-server: 580.178.04-0ubuntu0.24.04.1}
reboot_required:
  description: Whether the installed driver runs only after a reboot.
  returned: success
  type: bool
reboot_reasons:
  description: Why a reboot is required.
  returned: success
  type: list
  elements: str
marker:
  description: The driver method recorded on the node, if any.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver_host import DRIVER_ARGS, driver_result


def main() -> None:
    module = AnsibleModule(argument_spec=DRIVER_ARGS, supports_check_mode=True)
    module.exit_json(**driver_result(module))


if __name__ == "__main__":
    main()

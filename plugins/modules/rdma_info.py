#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_info
short_description: Plan a node's RDMA stack and GPUDirect path (DMA-BUF or nvidia-peermem), GDS and GDRCopy
version_added: 0.1.0
description:
  - Decides from the hardware facts of M(gpuops.nvidia.gpu_info) (the ConnectX NICs on the PCI bus, the GPUs, the kernel,
    a host MLNX_OFED or DOCA-OFED) and the driver's kernel module type which RDMA stack the node gets - the
    distribution's (C(rdma-core)), DOCA-OFED from NVIDIA's DOCA repository, or the OFED already on the host, left as it
    is - and which GPUDirect RDMA path - DMA-BUF (open kernel modules, Turing or newer, Linux 5.12 or newer; the default)
    or the legacy C(nvidia-peermem) (it needs MLNX_OFED or DOCA-OFED and the driver built by DKMS against it).
  - Names the packages to install and hold, and the kernel modules to load at every boot.
  - Fails, naming the variable, before any change, on C(nvidia-peermem) without an OFED or with precompiled driver
    modules, GPUDirect Storage with the proprietary kernel modules, GDS or GDRCopy packages no repository of the node
    offers, and a DOCA release, repository URL, distribution or architecture DOCA does not serve.
  - Reads the package database (C(dpkg-query) or C(rpm)) and, for GDS and GDRCopy, what the repositories offer
    (C(apt-cache policy) or C(dnf repoquery)). Never changes anything; always returns C(changed=false).
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  stack:
    description:
      - C(auto) keeps an OFED found on the host and installs the distribution's RDMA stack elsewhere; C(inbox) the
        distribution's; C(doca) DOCA-OFED of O(doca_version) from O(doca_repo_url).
      - Only on nodes with a ConnectX NIC.
    type: str
    choices: [auto, inbox, doca]
    default: auto
  nics:
    description:
      - C(auto) looks at the PCI bus; C(present) plans for ConnectX NICs where none is visible (an image built for
        nodes that have them).
    type: str
    choices: [auto, present]
    default: auto
  peermem:
    description: The legacy C(nvidia-peermem) path, also where DMA-BUF could work.
    type: bool
    default: false
  gds:
    description: GPUDirect Storage (the C(nvidia-fs) module).
    type: bool
    default: false
  gdrcopy:
    description: GDRCopy (the C(gdrdrv) module).
    type: bool
    default: false
  module_type:
    description: The kernel module type the driver gets (C(open) or C(proprietary)); empty when not known.
    type: str
    default: ""
  module_type_variable:
    description: Where O(module_type) comes from, for the messages.
    type: str
    default: gpuops_driver_kernel_module_type
  driver_method:
    description: The driver role's C(gpuops_driver_method) (C(auto) is resolved as the driver role resolves it).
    type: str
    default: auto
  driver_repository:
    description: The driver role's C(gpuops_driver_repository).
    type: str
    default: distro
  kernel:
    description: The kernel release the modules are for; empty for the running one.
    type: str
    default: ""
  doca_version:
    description: The DOCA release to install with O(stack=doca).
    type: str
    default: ""
  doca_repo_url:
    description: The base of DOCA's repository (the release, distribution and architecture are appended).
    type: str
    default: ""
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
- name: Plan RDMA
  gpuops.nvidia.rdma_info:
    gpu_info: "{{ gpuops_gpu_info }}"
    distribution: "{{ ansible_facts.distribution }}"
    major_version: "{{ ansible_facts.distribution_major_version }}"
    module_type: open
  register: rdma
"""

RETURN = r"""
plan:
  description:
    - C(nics) (the RDMA NICs' bus ids; an NVLink5 board's switch management bridges are not), C(path) (C(dmabuf),
      C(peermem) or C(none)) and C(reason), C(stack) (C(inbox), C(doca), C(host) or C(none)), C(family), C(ofed) (as
      gpu_info read it), C(packages) (to be installed), C(install) (those not installed yet), C(hold) and C(not_held),
      C(modules) (to load at every boot), C(doca_repo) (C(url) and C(version), or null), C(warnings) and C(installed).
  returned: success
  type: dict
  sample:
    nics: ["0000:19:00.0"]
    path: dmabuf
    reason: "1 ConnectX NIC(s); DMA-BUF: open kernel modules, Turing or newer GPUs, Linux 6.8.0-45-generic"
    stack: inbox
    family: ubuntu
    ofed: {present: false, version: null, kernel_source: false}
    packages: [rdma-core, ibverbs-utils]
    install: [ibverbs-utils]
    hold: []
    not_held: []
    modules: []
    doca_repo: null
    warnings: []
    installed: {rdma-core: {version: 50.0-2build2, held: false}}
boot_list:
  description:
    - The file that loads the GPUDirect modules at every boot (C(path)) and whether it is there now (C(present)), so
      that a role removes it only where it is.
  returned: success
  type: dict
  sample: {path: /etc/modules-load.d/gpuops-rdma.conf, present: false}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.rdma_run import ARGUMENT_SPEC, run


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run(module, module.params)
    except PlanError as exc:
        module.fail_json(msg=str(exc), variable=exc.variable)
    except (RuntimeError, OSError) as exc:
        module.fail_json(msg=str(exc))
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

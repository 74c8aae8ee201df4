#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: driver_files
short_description: Plan the NVIDIA driver as driver_info does, and put the host driver's files in place
version_added: 0.2.0
description:
  - Plans the driver exactly as M(gpuops.nvidia.driver_info) does (same options, same refusals, same result), then, for a
    host driver (not C(containerized)), puts its plain files in place as M(gpuops.nvidia.node_files) would, in the same
    run, from what it just read.
  - The files - the state directory and its record that the host driver owns the GPUs (C(<state_dir>/driver-method)), the
    module options in O(modprobe_file) (no file without options) and, where the node has nvidia-persistenced's unit and
    O(persistenced) is on, a drop-in that runs it in persistence mode as the unit's own user.
  - The unit - nvidia-persistenced enabled (Ubuntu's unit has no C([Install]) section; udev starts it when the driver
    binds) and, where the driver runs now (its module loaded, no reboot pending, not an image build), started, and
    restarted when the drop-in changed.
  - The driver role calls it for its plan and after its install, so that a converged node costs one round trip for
    both; M(gpuops.nvidia.driver_info) stays the read-only plan.
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  host_files:
    description: Put the host driver's files in place; C(false) plans only, as M(gpuops.nvidia.driver_info) does.
    type: bool
    default: true
  persistenced:
    description: Run nvidia-persistenced in persistence mode (the drop-in), where the node has its unit.
    type: bool
    default: true
  modprobe_file:
    description: The modprobe file for O(module_options); removed when there are none.
    type: path
    default: /etc/modprobe.d/gpuops-nvidia.conf
extends_documentation_fragment:
  - gpuops.nvidia.node_plan
  - gpuops.nvidia.driver_request
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - Plans as in a real run and reports each file and unit change it would make, making none.
  diff_mode:
    support: full
    details:
      - Each changed file's text before and after.
  idempotent:
    support: full
seealso:
  - module: gpuops.nvidia.driver_info
  - module: gpuops.nvidia.node_files
"""

EXAMPLES = r"""
- name: Plan the driver and keep its files
  gpuops.nvidia.driver_files:
    gpu_info: "{{ gpuops_gpu_info }}"
    distribution: "{{ ansible_facts.distribution }}"
    major_version: "{{ ansible_facts.distribution_major_version }}"
    branch: "580"
    module_options: {nvidia: {NVreg_EnableGpuFirmware: 1}}
  register: plan
"""

RETURN = r"""
plan:
  description: The plan, as M(gpuops.nvidia.driver_info) returns it.
  returned: success
  type: dict
installed:
  description: The driver the node has, as M(gpuops.nvidia.driver_info) returns it.
  returned: success
  type: dict
candidates:
  description: The candidate version of each planned package, as M(gpuops.nvidia.driver_info) returns it.
  returned: success
  type: dict
reboot_required:
  description: Whether the installed driver runs only after a reboot, as M(gpuops.nvidia.driver_info) says it.
  returned: success
  type: bool
reboot_reasons:
  description: Why, as M(gpuops.nvidia.driver_info) says it.
  returned: success
  type: list
  elements: str
marker:
  description: The driver method recorded on the node, as M(gpuops.nvidia.driver_info) returns it.
  returned: success
  type: str
node_files:
  description:
    - What was done with the host driver's files and unit (or would be, in check mode), as M(gpuops.nvidia.node_files)
      returns it (C(changed), C(files), C(units), C(daemon_reloaded), C(changed_paths)).
  returned: with O(host_files), when the plan is for a host driver
  type: dict
  sample: {"changed": false, "files": [{"path": "/etc/gpuops-nvidia", "state": "directory", "changed": false, "backup": "", "present": true}],
           "units": [{"name": "nvidia-persistenced.service", "actions": []}], "daemon_reloaded": false, "changed_paths": []}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver_host import DRIVER_ARGS, FILES_ARGS, files_result


def main() -> None:
    module = AnsibleModule(argument_spec={**DRIVER_ARGS, **FILES_ARGS}, supports_check_mode=True)
    module.exit_json(**files_result(module, module._diff))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: role_inputs
short_description: Check the inputs of several of the collection's roles in one task
version_added: 0.2.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Checks, for each role in O(roles), the role variables its argument spec (C(meta/argument_specs.yml)) names for the
    entry point O(entry_point), with the values the task sees, as Ansible's own check at the start of a role does; then
    the role's own checks, which its C(meta/inputs.yml) declares where it has one - the kind of each variable (an image,
    a port, a URL ...) and the rules across variables (a device plugin config against the GPUs' models ...), computed in
    Python on the controller.
  - Fails with every error of every role in one message, each naming the role variable, its value and what is accepted.
    A role's own checks are left out where its argument spec already refused a value they would need.
  - The values of options the specs mark C(no_log) are masked in the messages.
  - C(playbooks/cluster.yml) checks its nine roles with one such task before anything is applied, then imports them
    with C(rolespec_validate=false); each role checks itself with this action when it runs alone.
  - An action that runs on the controller only; it never connects to the host.
options:
  roles:
    description: The roles, by name in this collection (C(device_plugin) or C(gpuops.nvidia.device_plugin)).
    type: list
    elements: str
    required: true
  entry_point:
    description:
      - The entry point of each role's argument spec to check against; a role without it has no spec to check (its own
        checks are made all the same).
    type: str
    default: main
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.controller
attributes:
  check_mode:
    support: full
    details:
      - It only reads variables.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Check the inputs of the cluster roles this play deploys, before anything is applied
  gpuops.nvidia.role_inputs:
    roles: [cluster_prereqs, device_plugin, gpu_feature_discovery, dcgm_exporter]
"""

RETURN = r"""
roles:
  description: The roles checked, by their short names.
  returned: always
  type: list
  elements: str
  sample: [cluster_prereqs, device_plugin]
input_errors:
  description: Each error found, in the order of O(roles), argument specs first.
  returned: failure
  type: list
  elements: str
  sample: ["value of gpuops_node_feature_discovery_deploy must be one of: auto, true, false, got: maybe"]
"""

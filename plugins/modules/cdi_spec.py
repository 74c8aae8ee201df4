#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cdi_spec
short_description: Generate, check and install the NVIDIA CDI spec with nvidia-ctk
version_added: 0.1.0
description:
  - Runs the toolkit's C(nvidia-ctk cdi generate) into a temporary file, checks the result against the CDI
    schema's rules (version, C(vendor/class) kind, at least one device, unique names, container edits that are
    not empty, absolute paths, known hook names, no unknown fields) and, given O(gpu_info), that every GPU and
    MIG device it read has its device name, then puts it in place atomically.
  - Idempotent - the spec is compared as data with the one in place, so a different header, key order or
    formatting is no change.
  - Returns the device names, for C(nvidia.com/gpu=<name>) references.
  - The toolkit's C(nvidia-cdi-refresh) units (toolkit 1.18 and later) regenerate C(/var/run/cdi/nvidia.yaml) when
    the driver changes; this module writes the same file by default, so the two never disagree on where it is.
  - After the spec, it puts O(files) and O(units) in place as M(gpuops.nvidia.node_files) does (the refresh units'
    drop-ins, say), in the same run.
requirements:
  - the NVIDIA Container Toolkit (C(nvidia-ctk)) and a loaded driver on the managed node
  - PyYAML (python3-yaml) for a C(.yaml) spec
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  path:
    description: The spec file; its extension (C(.yaml), C(.yml) or C(.json)) sets the format.
    type: path
    default: /var/run/cdi/nvidia.yaml
  state:
    description: C(present) generates the spec; C(absent) removes the file.
    type: str
    choices: [present, absent]
    default: present
  nvidia_ctk:
    description: The nvidia-ctk executable; found in C(PATH) when not given.
    type: path
  driver_root:
    description: Root of the driver's files (C(/run/nvidia/driver) for a driver in a container); C(/) by default.
    type: path
  dev_root:
    description: Root of the driver's device nodes; defaults to O(driver_root).
    type: path
  device_name_strategy:
    description: How devices are named (nvidia-ctk's default is C(index) and C(uuid)).
    type: list
    elements: str
    choices: [index, uuid, type-index]
    default: [index, uuid]
  kind:
    description: The spec's kind, C(<vendor>/<class>).
    type: str
    default: nvidia.com/gpu
  gpu_info:
    description:
      - What M(gpuops.nvidia.gpu_info) read on this node (C(gpuops_gpu_info)); every GPU and MIG device in it must
        have its name in the spec, or nothing is written and the module fails naming the missing ones.
    type: dict
  backup:
    description:
      - Keep a copy of the spec in place before it is replaced or removed, beside it, named
        C(<file>.<pid>.<date>@<time>~) (the CDI loaders read only C(.json), C(.yaml) and C(.yml) files, so the
        copy is not read as a spec).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.node_files
  - gpuops.nvidia.node_files.image_build
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - The spec is still generated, into a temporary directory that is removed, so the reported change is real;
        nothing is put in place and, with O(state=absent), nothing is removed.
  diff_mode:
    support: full
    details:
      - The spec file's text before and after.
  idempotent:
    support: full
    details:
      - The generated spec is compared as data with the one in place, so a second run changes nothing unless
        C(nvidia-ctk) now generates different devices (the driver, the GPUs or their MIG devices changed in between).
notes:
  - Supports check mode and diff. In check mode the spec is still generated (into a temporary directory that is
    removed) so the diff is real; nothing is put in place.
seealso:
  - module: gpuops.nvidia.container_runtime
"""

EXAMPLES = r"""
- name: Generate the CDI spec for the GPUs gpu_info found
  gpuops.nvidia.cdi_spec:
    gpu_info: "{{ gpuops_gpu_info }}"
  register: cdi

- name: A driver in a container
  gpuops.nvidia.cdi_spec:
    driver_root: /run/nvidia/driver
"""

RETURN = r"""
path:
  description: The spec file.
  returned: always
  type: str
  sample: /var/run/cdi/nvidia.yaml
devices:
  description: The device names in the spec.
  returned: when state is present
  type: list
  elements: str
  sample: ["0", "1", "GPU-8f6f1d9e-...", "all"]
cdi_version:
  description: The spec's cdiVersion.
  returned: when state is present
  type: str
  sample: 0.5.0
kind:
  description: The spec's kind.
  returned: when state is present
  type: str
  sample: nvidia.com/gpu
node_files:
  description:
    - What O(files) and O(units) did (or would do, in check mode), as M(gpuops.nvidia.node_files) returns it (C(changed),
      C(files), C(units), C(daemon_reloaded), C(changed_paths)).
  returned: when O(files) or O(units) are given
  type: dict
  sample: {"changed": false, "files": [], "units": [{"name": "nvidia-cdi-refresh.path", "actions": []}], "daemon_reloaded": false,
           "changed_paths": []}
backup_file:
  description: The copy of the spec made before it was replaced or removed.
  returned: when O(backup=true) and the spec was replaced or removed
  type: str
  sample: /var/run/cdi/nvidia.yaml.2041.2026-11-21@10:00:00~
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.cdi_run import ARGUMENT_SPEC, spec_result


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**spec_result(module, module._diff))


if __name__ == "__main__":
    main()

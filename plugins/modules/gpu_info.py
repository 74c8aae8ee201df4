#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Read a node's NVIDIA GPUs, NVSwitches and NICs, its driver state, and what follows from them
version_added: 0.1.0
description:
  - Reads the node once and returns one structure that every later decision of the collection is computed from.
  - From sysfs PCI, with no driver needed, every NVIDIA GPU (class 0300 or 0302), NVSwitch (class 0680) and
    NVIDIA networking device (vendor 15b3) with its bus id, device and subsystem ids, NUMA node and bound
    kernel driver, and each GPU's architecture from a curated device id table (unknown ids are reported as unknown).
  - From NVML through nvidia-ml-py, in one session, when the driver is loaded, the driver and CUDA driver
    versions and, per GPU, index, UUID, name, memory, compute capability, MIG capable/current/pending mode with
    the supported GPU-instance profiles and, in MIG mode, the MIG devices that exist (UUID, profile name as GFD
    spells it, memory, slices, engines), and persistence mode. When the binding or the library is missing or
    the driver is not loaded, C(nvml.status) says which and the PCI view is still returned.
  - Node state, the recommended kernel module type, whether Fabric Manager is required, and the node labels
    GPU Feature Discovery would set.
  - Never changes anything; always returns C(changed=false).
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  root:
    description:
      - Directory under which C(sys/) and C(proc/) are read.
      - C(/) on a server; point it elsewhere to read an image being built or a simulated hardware tree.
    type: path
    default: /
  nvml_library:
    description:
      - Path of the NVML library to load instead of the default C(libnvidia-ml.so.1).
    type: path
  sharing:
    description: GPU sharing the labels are computed for, as the device plugin will be configured.
    type: dict
    default: {}
    suboptions:
      strategy:
        description: Sharing strategy.
        type: str
        choices: [none, time-slicing, mps]
        default: none
      replicas:
        description: Replicas of each GPU; at least 2 with a sharing strategy.
        type: int
        default: 1
      rename_by_default:
        description: Whether shared GPUs are advertised as C(nvidia.com/gpu.shared), which keeps the product label.
        type: bool
        default: false
  mig_strategy:
    description: MIG strategy the labels are computed for.
    type: str
    choices: [none, single, mixed]
    default: none
requirements:
  - nvidia-ml-py (C(python3-pynvml)) on the node for the NVML part; without it the PCI view is still returned.
attributes:
  check_mode:
    description: Reads only, so it runs the same in check mode.
    support: full
  diff_mode:
    description: Changes nothing, so there is no diff.
    support: none
seealso:
  - name: GPU Feature Discovery labels
    description: The labels C(derived.labels) reproduces.
    link: https://github.com/NVIDIA/k8s-device-plugin
"""

EXAMPLES = r"""
- name: Read the GPUs
  gpuops.nvidia.gpu_info:
  register: gpu

- name: Show what the node needs
  ansible.builtin.debug:
    msg: >-
      {{ gpu.gpu_info.summary.gpu_count }} GPU(s), kernel modules
      {{ gpu.gpu_info.derived.kernel_module_type.type }},
      fabric manager {{ gpu.gpu_info.derived.fabric_manager.required }}

- name: Labels for a node whose GPUs are time-sliced four ways
  gpuops.nvidia.gpu_info:
    sharing:
      strategy: time-slicing
      replicas: 4

- name: Read an image being built in /mnt/image, with its own NVML library
  gpuops.nvidia.gpu_info:
    root: /
    nvml_library: /mnt/image/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
"""

RETURN = r"""
gpu_info:
  description: Everything read, and what follows from it.
  returned: always
  type: dict
  contains:
    schema_version:
      description: Version of this structure.
      type: int
      sample: 1
    pci:
      description: C(gpus), C(nvswitches) and C(network) devices from sysfs, in bus order.
      type: dict
      sample:
        gpus:
          - bus_id: "0000:18:00.0"
            device_id: "2330"
            class: "0302"
            architecture: hopper
            name: NVIDIA H100 80GB HBM3
            compute_capability: "9.0"
            numa_node: 0
            driver: nvidia
        nvswitches: []
        network: []
    node:
      description: Loaded modules (nouveau, nvidia modules and their flavour), Secure Boot, kernels, image build.
      type: dict
      sample:
        modules: {nouveau: false, nvidia: [nvidia], flavour: open}
        secure_boot: disabled
        kernel: {running: 6.8.0-45-generic, installed: [6.8.0-45-generic]}
        image_build: false
    nvml:
      description: The driver's view; C(status) is ok, binding_missing, library_not_found, driver_not_loaded or error.
      type: dict
      sample:
        status: ok
        driver_version: 550.54.15
        cuda_driver_version: "12.4"
        gpus:
          - index: 0
            uuid: GPU-4f0c1e7a-8d8e-5b1a-9a43-2f6c1d0e9b11
            name: NVIDIA A100 80GB PCIe
            bus_id: "0000:17:00.0"
            memory_mib: 81920
            compute_capability: "8.0"
            persistence_mode: true
            mig:
              capable: true
              current: true
              pending: true
              profiles: [{profile: 0, id: 19, name: 1g.10gb, instances: 7, slices: 1, memory_mib: 9728}]
              devices:
                - {index: 0, uuid: MIG-0c4b8e5e-3f0a-5d7b-8a1c-6f2e9d4a7b30, profile: 3g.40gb, gpu_instance_id: 1,
                   compute_instance_id: 0, memory_mib: 40192, multiprocessors: 42, slices_gi: 3, slices_ci: 3}
    summary:
      description: Counts, architectures, whether the driver answered and whether any GPU can do MIG.
      type: dict
    derived:
      description: The recommended kernel module type, whether Fabric Manager is required, and the GFD node labels.
      type: dict
      sample:
        kernel_module_type: {type: open, reason: hopper GPUs support the open modules, NVIDIA's default, error: null}
        fabric_manager: {required: true, reason: 4 NVSwitch device(s) on the PCI bus, nvlink5: false}
        labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: "8"}
        labels_source: nvml
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "nvml_library": {"type": "path"},
            "sharing": {
                "type": "dict",
                "default": {},
                "options": {
                    "strategy": {"type": "str", "choices": ["none", "time-slicing", "mps"], "default": "none"},
                    "replicas": {"type": "int", "default": 1},
                    "rename_by_default": {"type": "bool", "default": False},
                },
            },
            "mig_strategy": {"type": "str", "choices": ["none", "single", "mixed"], "default": "none"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        info = collect(p["root"], p["nvml_library"], p["sharing"], p["mig_strategy"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, gpu_info=info)


if __name__ == "__main__":
    main()

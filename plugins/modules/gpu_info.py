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
  - Node state (kernel modules, Secure Boot, kernels, image build), the recommended kernel module type and
    whether Fabric Manager is required.
  - It reports the hardware only, what the node is and not how the cluster uses it. The node labels GPU Feature Discovery sets
    depend on the cluster's sharing and MIG strategy, and the cluster roles compute them from this structure.
  - The structure is versioned by C(schema_version) (7 since the container runtimes installed are reported).
  - Never changes anything; always returns C(changed=false).
  - With O(checks), also answers the checks of the host roles that follow it in the play (the node's one read,
    docs/node-read.md).
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
  distribution_facts:
    description:
      - Also return the distribution facts the collection's roles read (C(distribution), C(distribution_major_version),
        C(os_family), C(architecture), C(kernel)) as C(ansible_facts), with the values C(ansible.builtin.setup) gives them,
        so that a play needs no C(setup) round trip. They are read from os-release, for the distributions the collection
        installs on (Ubuntu, Debian, Red Hat Enterprise Linux, Rocky Linux, AlmaLinux); on any other none are returned
        (the preflight role then runs C(setup)).
    type: bool
    default: false
    version_added: 0.2.0
  checks:
    description:
      - Also answer, in the same round trip, the checks of the host roles that follow in the play, each published by its
        role in one shape (C(__gpuops_<role>_read_check), docs/node-read.md) - C(role), one of C(nouveau), C(rdma), C(driver),
        C(fabric_manager), C(container_toolkit), and C(settings), that role's module options but the GPUs and the
        distribution, which are this read's (the distribution from os-release). RV(answers) has, per role asked, what
        that module would return with them, in check mode, and the role takes it instead of a module run of its own
        where the answer still holds (the C(gpuops.nvidia.node_answer) filter decides).
      - C(nouveau) answers the M(gpuops.nvidia.nouveau) module's check (its options C(state), C(initramfs), C(unload),
        C(root), C(image_build); the others at their defaults).
      - C(rdma) answers M(gpuops.nvidia.rdma_info)'s plan; its C(module_type=auto) stands for this read's recommendation
        (C(derived.kernel_module_type.type)).
      - C(driver) answers M(gpuops.nvidia.driver_files)' plan; the warnings of a plan answered are this module's, after
        C(the driver role's check:).
      - C(fabric_manager) answers M(gpuops.nvidia.fabric_manager_info)'s plan after the driver's plan as this read answers
        it - a null C(driver_version) stands for the version that plan finds installed, a null C(image_build) for its
        image build; without a C(driver) check, or where the driver's plan is not answered, this is not answered either.
      - C(container_toolkit) answers M(gpuops.nvidia.container_runtime)'s settings check (its
        O(gpuops.nvidia.container_runtime#module:validate_only) run). Its C(cdi_spec) holds the CDI spec's settings
        without the GPUs; the spec's check is made with this read's GPUs, and only where NVML answers with some; its
        C(cdi_refresh), the refresh units' check, where the spec's is not made. Its warnings are this module's, after
        C(the container_toolkit role's settings check:) (containerd 1.6's, which has no CDI, on every run).
      - The answers planned from apt's package lists (all but C(nouveau)) are made only while those lists are under an
        hour old (RV(package_lists_age)), as the roles refresh older lists before they plan and then take no answer;
        their C(result) is null otherwise.
      - Nothing is changed, whatever it finds. Settings a module would refuse, and a plan it would refuse or warn about,
        are not answered (C(result) is null), and this module does not fail for them; the role's own run says why.
      - A role named twice, or not one of those above, fails the module before anything is read.
    type: list
    elements: dict
    version_added: 0.2.0
    suboptions:
      role:
        description:
          - The host role whose check this is.
        type: str
        required: true
        choices: [nouveau, rdma, driver, fabric_manager, container_toolkit]
      settings:
        description:
          - That role's module options, as the role would pass them (but the GPUs and the distribution).
        type: dict
        required: true
requirements:
  - nvidia-ml-py (C(python3-pynvml)) on the node for the NVML part; without it the PCI view is still returned.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
  - gpuops.nvidia.attributes.info_module
attributes:
  check_mode:
    details:
      - It only reads (sysfs, C(/proc) and NVML), so it runs the same in check mode.
seealso:
  - module: gpuops.nvidia.driver_info
    description: Plans the driver install from this structure.
  - name: GPU Feature Discovery
    description: Its node labels, which the cluster roles compute from this structure with the cluster's sharing and MIG strategy.
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

- name: Stop when the node has GPUs but NVML did not answer
  ansible.builtin.assert:
    that: gpu.gpu_info.nvml.status == 'ok' or gpu.gpu_info.summary.gpu_count == 0
    fail_msg: "NVML: {{ gpu.gpu_info.nvml.status }} ({{ gpu.gpu_info.nvml.error }})"

- name: Read an image being built in /mnt/image, with its own NVML library
  gpuops.nvidia.gpu_info:
    root: /
    nvml_library: /mnt/image/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
"""

RETURN = r"""
gpu_info:
  description:
    - Everything read, and what follows from it. Declared as typed structures in the collection's
      C(module_utils/_common/facts.py), versioned by C(schema_version).
  returned: always
  type: dict
  contains:
    schema_version:
      description: Version of this structure; 2 since the GFD node labels left it (C(derived.labels), C(derived.labels_source)).
      type: int
      sample: 2
    root:
      description: The directory C(sys/) and C(proc/) were read under (the O(root) option).
      type: str
      sample: /
    pci:
      description: NVIDIA devices from sysfs, in bus order, with no driver needed.
      type: dict
      contains:
        gpus:
          description:
            - GPUs (class 0300 or 0302). Each has C(bus_id), C(vendor_id), C(device_id), C(subsystem_vendor_id),
              C(subsystem_device_id), C(class), C(numa_node) (null when unknown) and C(driver) (the bound kernel
              driver, or null), and from the collection's device table C(architecture) (C(unknown) for an id it
              does not list), C(name), C(compute_capability) (both null for an unknown id) and C(grace)
              (a Grace superchip).
          type: list
          elements: dict
          sample:
            - bus_id: "0000:18:00.0"
              vendor_id: 10de
              device_id: "2330"
              subsystem_vendor_id: 10de
              subsystem_device_id: "16c1"
              class: "0302"
              numa_node: 0
              driver: nvidia
              architecture: hopper
              name: NVIDIA H100 80GB HBM3
              compute_capability: "9.0"
              grace: false
        nvswitches:
          description: NVSwitches on the PCI bus, with the keys every device has and C(name) (the switch generation).
          type: list
          elements: dict
          sample: [{bus_id: "0000:05:00.0", device_id: 22a3, class: "0680", name: GH100 NVSwitch}]
        network:
          description:
            - NVIDIA (Mellanox) networking devices, with the keys every device has, C(family), and C(switch_managed)
              (the function's VPD carries C(SW_MNG), so it is a ConnectX bridge of an NVLink5 board's NVSwitches).
          type: list
          elements: dict
          sample: [{bus_id: "0000:1a:00.0", vendor_id: 15b3, device_id: "1021", class: "0207", family: ConnectX-7, switch_managed: false}]
    node:
      description: The node's kernel state.
      type: dict
      contains:
        modules:
          description:
            - C(nouveau) (loaded), C(nvidia) (the NVIDIA kernel modules loaded), C(flavour) (C(open) or C(proprietary)
              for the loaded nvidia module) and C(version) (its version, from C(/proc/driver/nvidia/version)); null
              when none is loaded.
          type: dict
          sample: {nouveau: false, nvidia: [nvidia, nvidia_uvm], flavour: open, version: 580.178.04}
        secure_boot:
          description: C(enabled), C(disabled), C(not_efi) (legacy boot) or C(unknown) (EFI, variable unreadable).
          type: str
          sample: disabled
        kernel:
          description: C(running) (release, or null), C(installed) (releases under C(/lib/modules)) and C(headers_installed) (the running one's).
          type: dict
          sample: {running: 6.8.0-45-generic, installed: [6.8.0-45-generic], headers_installed: true}
        image_build:
          description: Whether this is an image being built (a chroot, or no systemd running).
          type: bool
          sample: false
        rdma:
          description:
            - The RDMA stack - C(modules) (the RDMA and GPUDirect kernel modules loaded, among C(mlx5_core), C(mlx5_ib),
              C(ib_core), C(ib_uverbs), C(ib_umad), C(rdma_ucm), C(nvidia_peermem), C(nvidia_fs) and C(gdrdrv)) and C(ofed),
              a host MLNX_OFED or DOCA-OFED - C(present) (its C(ofed_info) script or C(/usr/src/ofa_kernel)), C(version)
              (the release C(ofed_info -s) prints, read from the script, or null) and C(kernel_source)
              (C(/usr/src/ofa_kernel), which C(nvidia-peermem) builds against).
          type: dict
          sample: {modules: [mlx5_core, mlx5_ib, ib_core, ib_uverbs], ofed: {present: false, version: null, kernel_source: false}}
        os:
          description:
            - The operating system as C(/etc/os-release) names it, C(id) and C(version_id) (null where missing); the
              driver container's image tag and its DaemonSets per OS are made of them.
          type: dict
          sample: {id: ubuntu, version_id: "24.04"}
        runfile:
          description:
            - C(/usr/bin/nvidia-uninstall) where NVIDIA's .run installer put a driver on the node (no package ships that
              file), else null. The preflight blocks on it and the driver role refuses, as packages or the driver container
              over a runfile driver make two drivers.
          type: str
          sample: null
        container_runtimes:
          description:
            - The container runtimes installed, C(containerd) and C(crio), where their executables are in C(PATH) or the
              C(sbin) directories (as the container_toolkit role's module finds them). The preflight blocks where that
              role would find none to configure.
          type: list
          elements: str
          sample: [containerd]
    nvml:
      description: The driver's view, read in one NVML session.
      type: dict
      contains:
        status:
          description: C(ok), C(binding_missing), C(library_not_found), C(driver_not_loaded) or C(error); C(gpus) is empty unless C(ok).
          type: str
          sample: ok
        error:
          description: Why NVML did not answer; null when C(status) is C(ok).
          type: str
          sample: null
        library:
          description: The NVML library loaded (O(nvml_library), or C(libnvidia-ml.so.1)).
          type: str
          sample: libnvidia-ml.so.1
        driver_version:
          description: The driver's version; null without NVML.
          type: str
          sample: 550.54.15
        cuda_driver_version:
          description: The CUDA version the driver supports; null without NVML.
          type: str
          sample: "12.4"
        nvml_version:
          description: NVML's version; null without NVML.
          type: str
          sample: 12.550.54.15
        gpus:
          description:
            - Per GPU, C(index), C(uuid), C(name), C(bus_id) (as sysfs writes it), C(memory_mib),
              C(compute_capability), C(persistence_mode), C(mig) and C(fabric).
            - C(fabric) is the GPU's place in its NVLink fabric (C(nvmlDeviceGetGpuFabricInfo)), C(state) -
              C(not_supported) (no fabric, or a driver without the call), C(not_started), C(in_progress), C(completed) -
              and, once completed, C(status) (C(success) or NVML's error) and C(clique_id).
            - C(mig) has C(capable), C(current) and C(pending) (MIG mode), C(profiles) (the GPU-instance profiles
              the GPU supports, each with C(profile), C(id), C(name), C(instances), C(slices), C(memory_mib),
              C(multiprocessors) and C(engines)) and C(devices) (in MIG mode, the MIG devices that exist, each with
              C(index), C(uuid), C(profile) as GFD spells it, C(gpu_instance_id), C(compute_instance_id),
              C(memory_mib), C(multiprocessors), C(slices_gi), C(slices_ci) and C(engines)).
            - C(engines) counts C(copy), C(decoder), C(encoder), C(jpeg) and C(ofa) engines.
          type: list
          elements: dict
          sample:
            - index: 0
              uuid: GPU-4f0c1e7a-8d8e-5b1a-9a43-2f6c1d0e9b11
              name: NVIDIA A100 80GB PCIe
              bus_id: "0000:17:00.0"
              memory_mib: 81920
              compute_capability: "8.0"
              persistence_mode: true
              fabric: {state: not_supported, status: null, clique_id: null}
              mig:
                capable: true
                current: true
                pending: true
                profiles:
                  - {profile: 0, id: 19, name: 1g.10gb, instances: 7, slices: 1, memory_mib: 9728, multiprocessors: 14,
                     engines: {copy: 1, decoder: 0, encoder: 0, jpeg: 0, ofa: 0}}
                devices:
                  - {index: 0, uuid: MIG-0c4b8e5e-3f0a-5d7b-8a1c-6f2e9d4a7b30, profile: 3g.40gb, gpu_instance_id: 1,
                     compute_instance_id: 0, memory_mib: 40192, multiprocessors: 42, slices_gi: 3, slices_ci: 3,
                     engines: {copy: 3, decoder: 2, encoder: 0, jpeg: 0, ofa: 0}}
    summary:
      description: What the rest of the collection reads most.
      type: dict
      contains:
        gpu_count:
          description: GPUs on the PCI bus.
          type: int
          sample: 8
        nvswitch_count:
          description: NVSwitches on the PCI bus.
          type: int
          sample: 4
        network_count:
          description: NVIDIA networking devices on the PCI bus.
          type: int
          sample: 8
        architectures:
          description: The GPUs' architectures, sorted, each once.
          type: list
          elements: str
          sample: [hopper]
        driver_loaded:
          description: Whether NVML answered (C(nvml.status) is C(ok)).
          type: bool
          sample: true
        mig_capable:
          description: Whether any GPU can do MIG; null when NVML reported no GPU.
          type: bool
          sample: true
    derived:
      description: The host-side decisions computed from the hardware.
      type: dict
      contains:
        kernel_module_type:
          description:
            - C(type) (C(open), C(proprietary), or null), C(reason), and C(error) when the GPUs need different
              kernel module types or no GPU is in the device table.
          type: dict
          sample: {type: open, reason: "hopper GPUs support the open modules, NVIDIA's default", error: null}
        fabric_manager:
          description:
            - C(mode), what the node runs for its NVLink fabric - C(none), C(fabricmanager) (NVSwitches on the PCI bus),
              C(nvlsm) (Fabric Manager with the NVLink Subnet Manager, an NVLink5 board) or C(imex) (a GB200/GB300 NVL
              compute tray) - with C(reason), C(required) (Fabric Manager must run) and C(nvlink5).
          type: dict
          sample: {mode: fabricmanager, required: true, reason: 4 NVSwitch device(s) on the PCI bus, nvlink5: false}
nvml_library_installed:
  description:
    - Whether an NVML library is there to load - O(nvml_library) exists, or C(libnvidia-ml.so.1) is in the dynamic
      linker's cache (C(ldconfig -p)). Where the binding is missing, it says whether installing it would bring in an
      NVIDIA library of its own.
  returned: always
  type: bool
  sample: true
package_lists_age:
  description:
    - Seconds since apt last refreshed its package lists, read the way C(ansible.builtin.apt)'s C(cache_valid_time)
      reads it (the mtime of C(/var/lib/apt/periodic/update-success-stamp), else of C(/var/lib/apt/lists)); C(null) on a
      node without apt. The node roles skip their refresh while it is under an hour, without a round trip of their own.
  returned: always
  type: int
  sample: 1250
answers:
  description:
    - With O(checks), per role asked, C(settings) (as the answering module read them; for C(rdma), C(driver) and
      C(fabric_manager) resolved - C(module_type), C(driver_version), C(image_build) - and with the distribution facts it
      planned for, C(distribution), C(major_version), C(architecture)) and C(result), what that role's module would
      return with them in check mode, or null where it would fail or warn (or the package lists are not fresh).
    - Where that module would fail, also C(refused), its message (naming the role's variable); the preflight blocks on it.
  returned: when O(checks) is set
  type: dict
  sample:
    nouveau: {settings: {state: present, initramfs: true, unload: true, root: /, image_build: auto},
              result: {changed: false, path: /etc/modprobe.d/gpuops-blacklist-nouveau.conf, loaded: false}}
    driver: {settings: {branch: "580", method: dkms, host_files: true, distribution: Ubuntu, major_version: "24", architecture: x86_64},
             result: {changed: false, plan: {method: dkms, install: []}, installed: {version: 580.95.05}}}
ansible_facts:
  description:
    - With O(distribution_facts), the distribution facts, as C(ansible.builtin.setup) gives them; empty on a distribution
      the collection does not install on.
  returned: when O(distribution_facts) is true
  type: dict
  sample: {distribution: Ubuntu, distribution_major_version: "24", os_family: Debian, architecture: x86_64}
"""

import os
import platform
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import OsRelease
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import answers, one_read
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect

# os-release's ID of each distribution the collection installs on, and Ansible's names for it (distribution, os_family).
# Not Ansible's fact collectors: importing any of them imports all (ansible.module_utils.facts' __init__), which made
# this, the one module every node run starts with, twice as heavy to send and to start.
ANSIBLE_NAMES = {
    "ubuntu": ("Ubuntu", "Debian"),
    "debian": ("Debian", "Debian"),
    "rhel": ("RedHat", "RedHat"),
    "rocky": ("Rocky", "RedHat"),
    "almalinux": ("AlmaLinux", "RedHat"),
}
DISTRIBUTION_FACTS = ("distribution", "distribution_major_version", "os_family", "architecture", "kernel")
LD_CACHE = "/etc/ld.so.cache"
# What ansible.builtin.apt's cache_valid_time compares with, in its order.
APT_LISTS_STAMPS = ("/var/lib/apt/periodic/update-success-stamp", "/var/lib/apt/lists")
# The age under which apt's lists are fresh (the node roles' refreshes use cache_valid_time 3600): older lists are
# refreshed before the roles plan, and the roles then take no answer planned from them.
FRESH_LISTS = 3600


def nvml_library_installed(library: str | None) -> bool:
    """The named library exists, or the linker's cache lists libnvidia-ml.so.1 (what `ldconfig -p` prints)."""
    if library:
        return os.path.exists(library)
    try:
        with open(LD_CACHE, "rb") as cache:
            return b"libnvidia-ml.so.1" in cache.read()
    except OSError:
        return False


def package_lists_age(now: float | None = None) -> int | None:
    """Seconds since apt's package lists were refreshed (as apt's cache_valid_time reads it); None without apt."""
    for stamp in APT_LISTS_STAMPS:
        try:
            mtime = os.stat(stamp).st_mtime
        except OSError:
            continue
        return max(0, int((time.time() if now is None else now) - mtime))
    return None


def distribution_facts(os_release: OsRelease) -> dict[str, str]:
    """The facts as setup names them, from os-release; none for a distribution the collection does not know."""
    names = ANSIBLE_NAMES.get(os_release["id"] or "")
    version = os_release["version_id"]
    if names is None or not version:
        return {}
    return {"distribution": names[0], "distribution_major_version": version.split(".")[0], "os_family": names[1],
            "architecture": platform.machine(), "kernel": platform.release()}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "nvml_library": {"type": "path"},
            "distribution_facts": {"type": "bool", "default": False},
            "checks": {"type": "list", "elements": "dict", "options": {
                "role": {"type": "str", "required": True, "choices": list(one_read.ROLES)},
                "settings": {"type": "dict", "required": True}}},
        },
        supports_check_mode=True,
    )
    p = module.params
    twice = one_read.asked_twice(p["checks"] or [])
    if twice:
        module.fail_json(msg=f"checks: each role's check is asked once; asked twice: {', '.join(twice)}")
    try:
        info = collect(p["root"], p["nvml_library"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    facts = distribution_facts(info["node"]["os"])
    extra: dict[str, object] = {"ansible_facts": facts} if p["distribution_facts"] else {}
    lists_age = package_lists_age()
    if p["checks"] is not None:
        # The checks of the roles that follow (module_utils/node/one_read.py); the plans read the package database
        # once between them.
        fresh = lists_age is not None and lists_age < FRESH_LISTS
        extra["answers"] = answers.answer_checks(module, p["checks"], info, facts, fresh)
    module.exit_json(changed=False, gpu_info=info, nvml_library_installed=nvml_library_installed(p["nvml_library"]),
                     package_lists_age=lists_age, **extra)


if __name__ == "__main__":
    main()

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The driver request driver_info plans (and driver_files plans and puts the host files of): its options besides the
    node_plan fragment's. Their argument spec is DRIVER_ARGS in module_utils/node/driver_host.py."""

    DOCUMENTATION = r"""
options:
  method:
    description:
      - C(precompiled) signed modules built by the distribution, C(dkms) modules built on the node,
        C(containerized) the driver container (nothing installed on the host).
      - C(auto) is C(precompiled) on Ubuntu from its archive and C(dkms) elsewhere.
    type: str
    choices: [auto, precompiled, dkms, containerized]
    default: auto
  repository:
    description: C(distro) the distribution's own archive, C(cuda) NVIDIA's CUDA repository (or a mirror of it).
    type: str
    choices: [distro, cuda]
    default: distro
  branch:
    description: Driver branch, for example C(580); empty keeps the installed branch, or takes the newest available.
    type: str
    default: ""
  kernel_module_type:
    description: C(open) or C(proprietary) kernel modules; C(auto) takes the GPUs' recommendation.
    type: str
    choices: [auto, open, proprietary]
    default: auto
  kernel_release:
    description:
      - Kernel to install the modules for; empty for the running kernel, or the newest installed one in an image build.
      - Empty, a newer installed kernel (the one the node boots next) is planned too (C(boot_kernel) in RV(plan)).
    type: str
    default: ""
  compute_only:
    description: Headless compute userspace only (no X, OpenGL, video or display libraries).
    type: bool
    default: true
  allow_branch_change:
    description: Allow replacing an installed driver of another branch.
    type: bool
    default: false
  allow_method_change:
    description: Allow a host driver on a node recorded as set for the containerized driver.
    type: bool
    default: false
  remove_host_driver:
    description:
      - With O(method=containerized), plan to purge a host driver (every driver package, C(remove); the held ones and a
        held Fabric Manager in C(unhold)) instead of refusing it.
    type: bool
    default: false
    version_added: 0.2.0
  cuda_repo_url:
    description: Base URL of the CUDA repository (NVIDIA's, or an internal mirror with the same layout).
    type: str
    default: https://developer.download.nvidia.com/compute/cuda/repos
  repo_ready:
    description: Whether the CUDA repository is configured, so its candidates can be checked.
    type: bool
    default: false
  offline:
    description:
      - Check only what needs no package lists (branch, flavour, method, kernel, branch change, containerized
        conflicts) and run no C(apt-cache); the role does this before it refreshes the lists.
    type: bool
    default: false
  image_build:
    description: C(auto) detects an image build (chroot, no running systemd); C(true)/C(false) force it.
    type: str
    choices: ["auto", "true", "false"]
    default: auto
  state_dir:
    description: Where the collection records the node's driver method.
    type: path
    default: /etc/gpuops-nvidia
  module_options:
    description: "Kernel module options, C({module: {option: value}}), checked and rendered as a modprobe file."
    type: dict
    default: {}
  root:
    description: File system root whose C(lib/modules) holds the kernels (and whose systemd directories hold nvidia-persistenced's unit).
    type: path
    default: /
"""

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The options every plan module of the host side takes (driver_info, fabric_manager_info, rdma_info): the
    hardware facts and the distribution the plan is made for. Their argument spec is PLAN_ARGS in
    module_utils/node/host.py."""

    DOCUMENTATION = r"""
options:
  gpu_info:
    description: The C(gpu_info) structure returned by M(gpuops.nvidia.gpu_info).
    type: dict
    required: true
  distribution:
    description: The distribution as Ansible names it (C(ansible_facts.distribution)).
    type: str
    required: true
  major_version:
    description: Its major version (C(ansible_facts.distribution_major_version)).
    type: str
    required: true
  architecture:
    description: The machine architecture (C(ansible_facts.architecture)).
    type: str
    default: x86_64
"""

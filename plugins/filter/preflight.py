# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: preflight
short_description: The preflight findings and report for a node's gpu_info
version_added: 0.1.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Computes from the structure returned by M(gpuops.nvidia.gpu_info) what will block the install
    (blockers) or deserves attention (warnings), each with its fix, and a readable report.
positional: distribution, major_version, settings, host
options:
  _input:
    description: The C(gpu_info) structure.
    type: dict
    required: true
  distribution:
    description: C(ansible_facts.distribution).
    type: str
    required: true
  major_version:
    description: C(ansible_facts.distribution_major_version).
    type: str
    required: true
  settings:
    description: C(driver_method) (precompiled, dkms, containerized, none) and C(fabricmanager_enabled).
    type: dict
    required: true
  host:
    description: Host name for the report's heading.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Compute the findings
  ansible.builtin.set_fact:
    preflight: >-
      {{ gpu.gpu_info | gpuops.nvidia.preflight(ansible_facts.distribution, ansible_facts.distribution_major_version,
         {'driver_method': 'precompiled', 'fabricmanager_enabled': true}, inventory_hostname) }}
"""

RETURN = r"""
_value:
  description: C(findings) (list of id, severity, message, fix), C(blockers) (count) and C(report) (lines).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.preflight import findings, report_lines


def preflight(gpu_info: dict, distribution: str, major_version: str, settings: dict, host: str) -> dict:
    try:
        found = findings(gpu_info, distribution, str(major_version), settings)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return {
        "findings": found,
        "blockers": sum(1 for f in found if f["severity"] == "blocker"),
        "report": report_lines(host, gpu_info, found),
    }


class FilterModule:
    """The collection's filters."""

    def filters(self) -> dict:
        return {"preflight": preflight}

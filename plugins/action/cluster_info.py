# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cluster_info: the module's work in the task's worker process where it would run on this controller (plugin_utils/in_process)."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.modules.cluster_info import ARGUMENT_SPEC, run
from ansible_collections.gpuops.nvidia.plugins.plugin_utils.in_process import InProcessAction


class ActionModule(InProcessAction):
    argument_spec = ARGUMENT_SPEC
    body = staticmethod(run)

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The attributes every module of the collection declares.

    The base fragment (gpuops.nvidia.attributes) describes check_mode, diff_mode and idempotent; each module
    sets their `support` (and `details` where it is not simply full or none) in its own `attributes` block.
    The named fragments add the action group of meta/runtime.yml the module belongs to; a module takes exactly one.
    """

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and then reports the change it would make, without making it.
  diff_mode:
    description: Returns, when run with C(--diff), what it changed (or would change in check mode) as before and after.
  idempotent:
    description: Run twice in a row with the same arguments, the first time not in check mode, the second run reports no change.
"""

    # The modules that only read (the *_info modules); each says in its own check_mode details what it reads.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
    details:
      - It changes nothing, so there is no diff.
  idempotent:
    support: full
    details:
      - It never changes anything and always returns C(changed=false).
"""

    # The modules that run on a GPU node (meta/runtime.yml action group `node`, and `gpu`, its 0.1 name).
    ACTIONGROUP_NODE = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/gpuops.nvidia.node) in C(module_defaults) to set options of the node modules once for a play.
    support: full
    membership:
      - gpuops.nvidia.node
      - gpuops.nvidia.gpu
"""

    # The cluster modules with an action plugin of their own (plugins/action, plugins/plugin_utils/in_process.py).
    IN_PROCESS = r"""
options: {}
attributes:
  action:
    description:
      - An action plugin of the same name runs the module's work in the task's own worker process on the controller
        where the task's connection is local (no become, async or task C(environment)) and the connection to the API
        server needs no kubernetes client, saving the module's start (a new Python process); elsewhere it runs the
        module. The arguments, the checks and the result are the module's either way.
    support: full
"""

    # The actions that never connect to a host (a module file of documentation only, beside the action plugin that does
    # the work): in no action group, as no side's options apply to them.
    CONTROLLER = r"""
options: {}
attributes:
  action:
    description: An action plugin of the same name does the work on the controller; it never connects to a host.
    support: full
  action_group:
    description: In no action group - it takes none of the node or cluster modules' options.
    support: none
    membership: []
"""

    # The modules that talk to the API server (meta/runtime.yml action group `cluster`).
    ACTIONGROUP_CLUSTER = r"""
options: {}
attributes:
  action_group:
    description:
      - Use C(group/gpuops.nvidia.cluster) in C(module_defaults) to set options of the cluster modules once for a play,
        for example O(kubeconfig) and O(context).
    support: full
    membership:
      - gpuops.nvidia.cluster
"""

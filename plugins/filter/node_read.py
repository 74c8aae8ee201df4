# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's one read, on the controller: whether a host role's answer holds, what a role leaves to the roles after it,
and where an answer plans nothing to do (module_utils/node/one_read.py holds the rules, docs/node-read.md the contract)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule

# Imported at first use (module_utils/_common/lazy.py says why).
if TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import one_read
else:
    one_read = LazyModule("ansible_collections.gpuops.nvidia.plugins.module_utils.node.one_read")


def node_answer(answers: Any, role: str, settings: Any, facts: Any = None) -> dict[str, Any] | None:
    try:
        return one_read.holds(answers, role, settings, facts)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def node_answers_after(answers: Any, role: str, changed: Any) -> dict[str, Any]:
    return one_read.after(answers, role, bool(changed))


def rdma_applies(plan: Any) -> bool:
    return one_read.rdma_applies(plan)


def driver_converged(answer: Any, hold: Any) -> dict[str, Any] | None:
    return one_read.driver_converged(answer, bool(hold))


def fabric_manager_converged(answer: Any, hold: Any, config: Any, gpu_info: Any) -> dict[str, Any] | None:
    return one_read.fabric_manager_converged(answer, bool(hold), config, gpu_info)


def fabric_complete(gpu_info: Any) -> bool:
    return one_read.fabric_complete(gpu_info)


class FilterModule:
    """The collection's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"node_answer": node_answer, "node_answers_after": node_answers_after, "rdma_applies": rdma_applies,
                "driver_converged": driver_converged,
                "fabric_manager_converged": fabric_manager_converged, "fabric_complete": fabric_complete}

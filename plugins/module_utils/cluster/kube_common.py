# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the cluster code shares that needs no Kubernetes client: label selectors and parallel calls.

Kept apart from `kube` so that the filters (and the module_utils they import) never import the `kubernetes`
package: a task that uses any of the collection's filters loads them all, in a fresh worker process each time, and
importing the client alone took 0.2 s of every such task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

# Threads for the calls a module makes one per Node (label patches, reads).
WORKERS = 16

T = TypeVar("T")


def in_parallel(call: Callable[[T], object], items: Iterable[T]) -> dict[T, Exception]:
    """call(item) for every item on WORKERS threads; returns {item: exception} for the calls that raised."""
    from concurrent.futures import ThreadPoolExecutor

    def run(item: T) -> tuple[T, Exception | None]:
        try:
            call(item)
            return item, None
        except Exception as exc:  # reported to the caller, item by item
            return item, exc

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return {item: exc for item, exc in pool.map(run, items) if exc is not None}


def selector_matches(selector: Any, labels: Mapping[str, str] | None, absent: bool = True) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against labels, as the API server matches it; an empty
    selector matches everything. `absent`: what no selector at all means where it is used (True: everything,
    as NFD's namespace selector; False: nothing, as a PodDisruptionBudget's)."""
    if not isinstance(selector, dict):
        return absent
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True

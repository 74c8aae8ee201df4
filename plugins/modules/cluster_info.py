#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_info
short_description: Read Kubernetes objects of one kind, or the end of a pod's log
version_added: 0.2.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Gets the object O(name) of the kind O(kind), or lists the objects of that kind (in O(namespace), or in every
    namespace), and returns them in RV(resources) as M(kubernetes.core.k8s_info) returns its own, through the
    collection's one client (the API's plain JSON; the kubernetes client only for the connections plain HTTPS cannot
    make).
  - The kind is found in the API server's discovery document of O(api_version); a version or kind the server does not
    serve (a CRD not installed) reads as no objects, with RV(api_found) false. A named object that is not there reads
    as no objects.
  - With O(log), the last lines of a container's log of the pod O(name) instead, in RV(log_lines).
  - Reads only, so it runs the same in check mode. M(gpuops.nvidia.cluster_read) reads several kinds in one run.
options:
  api_version:
    description: The API version of the kind, as C(v1) or C(apps/v1).
    type: str
    default: v1
  kind:
    description: The kind, as C(Node) or C(DaemonSet).
    type: str
    required: true
  name:
    description: One object by its name; every object of the kind without it.
    type: str
  namespace:
    description: The namespace of a namespaced kind; every namespace without it.
    type: str
  label_selectors:
    description: Label selectors the objects listed must match (all of them), as C(app=nvidia-mig-manager). Not with O(name).
    type: list
    elements: str
    default: []
  field_selectors:
    description: Field selectors the objects listed must match (all of them), as C(spec.nodeName=node-1). Not with O(name).
    type: list
    elements: str
    default: []
  log:
    description:
      - Read the end of a container's log of the pod O(name) in O(namespace) (O(kind=Pod)) rather than the pod.
    type: dict
    suboptions:
      container:
        description: The container whose log to read; the pod's only container without it.
        type: str
      tail_lines:
        description: How many lines from the end; the whole log without it.
        type: int
extends_documentation_fragment:
  - gpuops.nvidia.kube
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_cluster
  - gpuops.nvidia.attributes.in_process
  - gpuops.nvidia.attributes.info_module
attributes:
  check_mode:
    details:
      - It only reads, so it runs the same in check mode.
"""

EXAMPLES = r"""
- name: Read a Node
  gpuops.nvidia.cluster_info:
    kind: Node
    name: gpu-node-1
  register: node

- name: The pods of the GPU namespace on a node
  gpuops.nvidia.cluster_info:
    kind: Pod
    namespace: gpu-operator
    field_selectors: ["spec.nodeName=gpu-node-1"]
  register: pods

- name: The end of the MIG manager's log
  gpuops.nvidia.cluster_info:
    kind: Pod
    namespace: gpu-operator
    name: nvidia-mig-manager-x7k2p
    log: {container: nvidia-mig-manager, tail_lines: 15}
  register: mig_manager_log
"""

RETURN = r"""
resources:
  description:
    - The objects (none, the one named, or every one listed), each as the server sent it, with its C(apiVersion) and
      C(kind) (a list's items lack them). Empty with O(log).
  returned: success
  type: list
  elements: dict
  sample: [{apiVersion: v1, kind: Node, metadata: {name: gpu-node-1, labels: {nvidia.com/gpu.present: "true"}}}]
api_found:
  description: Whether the API server serves O(kind) in O(api_version).
  returned: success
  type: bool
log:
  description: With O(log), the lines read, as one text.
  returned: success, with O(log)
  type: str
log_lines:
  description: With O(log), the lines read.
  returned: success, with O(log)
  type: list
  elements: str
path:
  description: The REST path of the read that failed.
  returned: failure of a read
  type: str
  sample: /api/v1/nodes/gpu-node-1
status:
  description: The HTTP status the API server answered it with (401, 403), C(null) where none came (no connection).
  returned: failure of a read
  type: int
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import (
    AUTH_ARGS,
    JsonApi,
    api_error,
    api_status,
    connect,
    resource_path,
    served_kinds,
)

ARGUMENT_SPEC: dict[str, Any] = {
    "api_version": {"type": "str", "default": "v1"},
    "kind": {"type": "str", "required": True},
    "name": {"type": "str"},
    "namespace": {"type": "str"},
    "label_selectors": {"type": "list", "elements": "str", "default": []},
    "field_selectors": {"type": "list", "elements": "str", "default": []},
    "log": {"type": "dict", "options": {
        "container": {"type": "str"},
        "tail_lines": {"type": "int"},
    }},
    **AUTH_ARGS,
}


class ReadFailed(Exception):
    def __init__(self, path: str, exc: Exception) -> None:
        super().__init__(api_error(exc))
        self.path, self.status = path, api_status(exc)


def _get(api: JsonApi, path: str) -> dict | None:
    try:
        return api.get(path)
    except Exception as exc:  # refused, unreachable: named with its path
        raise ReadFailed(path, exc) from exc


def served_kinds_or_fail(api: JsonApi, api_version: str) -> dict[str, dict[str, Any]] | None:
    """The kinds served in the API version (None: not served); ReadFailed where the server cannot say."""
    try:
        return served_kinds(api, api_version)
    except Exception as exc:  # refused, unreachable
        raise ReadFailed("/api/v1" if api_version == "v1" else f"/apis/{api_version}", exc) from exc


def objects(api: JsonApi, params: dict[str, Any]) -> tuple[bool, list[dict]]:
    """(whether the server serves the kind, its objects as k8s_info returns them)."""
    api_version, kind = params["api_version"], params["kind"]
    kinds = served_kinds_or_fail(api, api_version)
    found = (kinds or {}).get(kind)
    if found is None:
        return False, []
    namespace = params["namespace"] if found.get("namespaced") else None
    path = resource_path(api_version, str(found["name"]), namespace, params["name"])
    if params["name"]:
        data = _get(api, path)
        return True, [] if data is None else [data]
    query = [(key, ",".join(params[option])) for key, option in (("labelSelector", "label_selectors"), ("fieldSelector", "field_selectors"))
             if params[option]]
    try:
        items = api.list_items(path, query)
    except Exception as exc:  # refused, unreachable
        if api_status(exc) == 404:
            return True, []
        raise ReadFailed(path, exc) from exc
    return True, [{"apiVersion": api_version, "kind": kind, **item} for item in items]


def log_lines(api: JsonApi, params: dict[str, Any]) -> list[str]:
    """The last lines of the container's log, as the server sends them."""
    path = resource_path("v1", "pods", params["namespace"], params["name"]) + "/log"
    query = [(key, value) for key, value in (("container", params["log"]["container"]), ("tailLines", params["log"]["tail_lines"]))
             if value is not None]
    try:
        text = api.raw("GET", path, query=query, accept="text/plain").decode(errors="replace")
    except Exception as exc:
        raise ReadFailed(path, exc) from exc
    return text.splitlines()


def run(module: Any) -> None:
    """The module's work, given an AnsibleModule (or the action plugin's in-process stand-in for one)."""
    p = module.params
    if p["name"] and (p["label_selectors"] or p["field_selectors"]):
        module.fail_json(msg="label_selectors and field_selectors select among the objects listed: not with name")
    if p["log"] is not None and not (p["kind"] == "Pod" and p["api_version"] == "v1" and p["name"] and p["namespace"]):
        module.fail_json(msg=f"log reads a pod's log: it needs kind Pod (api_version v1), name and namespace; got kind {p['kind']} "
                             f"in {p['api_version']}, name {p['name']!r}, namespace {p['namespace']!r}")
    api = JsonApi(connect(module))
    try:
        if p["log"] is not None:
            lines = log_lines(api, p)
            module.exit_json(changed=False, resources=[], api_found=True, log="\n".join(lines), log_lines=lines)
        found, resources = objects(api, p)
    except ReadFailed as exc:
        module.fail_json(msg=f"reading {exc.path} failed: {exc}", path=exc.path, status=exc.status)
        raise  # not reached: fail_json exits
    module.exit_json(changed=False, resources=resources, api_found=found)


def main() -> None:
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_read
short_description: Read several kinds of Kubernetes objects in one module run
version_added: 0.2.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Gets or lists the objects of each entry of O(reads), the calls in parallel, and returns them by the entry's key, as
    M(kubernetes.core.k8s_info) returns its RV(kubernetes.core.k8s_info#module:resources) - one module run where a
    C(k8s_info) per kind would each load the client again.
  - A kind the server does not serve (a CRD not installed) or a named object that is not there reads as no objects.
  - With O(api_groups), also what the API server serves of those groups (their versions and kinds) and its version, in
    the shape M(kubernetes.core.k8s_cluster_info) returns for every group - a few calls where the discovery of every
    group took seconds.
  - Reads only, so it runs the same in check mode.
options:
  reads:
    description: What to read.
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: The name of this read's objects in RV(resources); each key once.
        type: str
        required: true
      api_version:
        description: The API version, as C(v1) or C(apps/v1).
        type: str
        required: true
      resource:
        description: The resource, plural and in lower case, as C(deployments) or C(customresourcedefinitions).
        type: str
        required: true
      name:
        description: One object by its name; all of them without it.
        type: str
      namespace:
        description: The namespace of a namespaced resource; all namespaces without it.
        type: str
      label_selectors:
        description: Label selectors the objects listed must match (all of them), as C(app.kubernetes.io/managed-by=gpuops.nvidia).
        type: list
        elements: str
        default: []
  api_groups:
    description:
      - API groups (as C(resource.k8s.io)) whose served versions and kinds to return in RV(apis), with the server's version
        in RV(version). A group the server does not serve is left out of RV(apis).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - gpuops.nvidia.kube
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_cluster
  - gpuops.nvidia.attributes.in_process
attributes:
  check_mode:
    support: full
    details:
      - It only reads.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Look for Node Feature Discovery and the ServiceMonitor CRD, in one run
  gpuops.nvidia.cluster_read:
    reads:
      - {key: nfd_crd, api_version: apiextensions.k8s.io/v1, resource: customresourcedefinitions, name: nodefeatures.nfd.k8s-sigs.io}
      - {key: deployments, api_version: apps/v1, resource: deployments}
      - {key: service_monitor_crd, api_version: apiextensions.k8s.io/v1, resource: customresourcedefinitions,
         name: servicemonitors.monitoring.coreos.com}
  register: cluster

- name: Whether the cluster serves resource.k8s.io/v1, and its version
  gpuops.nvidia.cluster_read:
    api_groups: [resource.k8s.io]
  register: cluster_apis
"""

RETURN = r"""
resources:
  description: Each read's key to its objects (none, one for a named object, or the list), each as the server sent it.
  returned: success
  type: dict
  sample: {nfd_crd: [], deployments: [{apiVersion: apps/v1, kind: Deployment, metadata: {name: nfd-master, namespace: nfd}}]}
apis:
  description:
    - With O(api_groups), each version the server serves of those groups (C(group/version)) to the kinds it serves there,
      each with its resource C(name), whether it is C(namespaced), C(preferred) (the group's preferred version),
      C(singular_name), C(short_names) and C(categories), as M(kubernetes.core.k8s_cluster_info) returns them.
  returned: success, with O(api_groups)
  type: dict
  sample: {resource.k8s.io/v1: {DeviceClass: {name: deviceclasses, namespaced: false, preferred: true}}}
version:
  description: With O(api_groups), the server's version (its C(/version) document) under C(server.kubernetes).
  returned: success, with O(api_groups)
  type: dict
  sample: {server: {kubernetes: {gitVersion: v1.36.3, major: "1", minor: "36"}}}
key:
  description: The key of the read that failed first (in the order of O(reads)).
  returned: failure of a read
  type: str
path:
  description: Its REST path.
  returned: failure of a read
  type: str
  sample: /api/v1/namespaces/gpu-operator
status:
  description: The HTTP status the API server answered it with (401, 403), C(null) where none came (no connection).
  returned: failure of a read
  type: int
server:
  description: The URL of the API server the read went to (the kubeconfig's, or O(host)).
  returned: failure of a read
  type: str
  sample: https://10.0.0.1:6443
missing_library:
  description: C(kubernetes) where the connection needs the kubernetes Python library and it is not installed.
  returned: failure to connect
  type: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import (
    AUTH_ARGS,
    JsonApi,
    api_error,
    api_status,
    connect,
    in_parallel,
    resource_path,
)


def read(api: JsonApi, entry: dict[str, Any]) -> list[dict]:
    """One entry's objects: the named one, or every one listed (with its apiVersion and kind, which a list's items lack)."""
    path = resource_path(entry["api_version"], entry["resource"], entry["namespace"], entry["name"])
    selectors = ",".join(entry["label_selectors"] or [])
    data = api.get(path, query=[("labelSelector", selectors)] if selectors and not entry["name"] else [])
    if data is None:
        return []
    if entry["name"]:
        return [data]
    kind = str(data.get("kind") or "")
    kind = kind[:-4] if kind.endswith("List") else kind
    return [{"apiVersion": data.get("apiVersion"), "kind": kind, **item} for item in data.get("items") or []]


ARGUMENT_SPEC: dict[str, Any] = {
    "reads": {"type": "list", "elements": "dict", "default": [], "options": {
        "key": {"type": "str", "required": True, "no_log": False},
        "api_version": {"type": "str", "required": True},
        "resource": {"type": "str", "required": True},
        "name": {"type": "str"},
        "namespace": {"type": "str"},
        "label_selectors": {"type": "list", "elements": "str", "default": []},
    }},
    "api_groups": {"type": "list", "elements": "str", "default": []},
    **AUTH_ARGS,
}


def group_kinds(api: JsonApi, group: str) -> dict[str, dict[str, Any]]:
    """Each version the server serves of an API group to its kinds, as k8s_cluster_info keys them; {} where it serves none."""
    found = api.get(f"/apis/{group}")
    if found is None:
        return {}
    preferred = (found.get("preferredVersion") or {}).get("groupVersion")
    out: dict[str, dict[str, Any]] = {}
    for version in found.get("versions") or []:
        group_version = str(version.get("groupVersion"))
        data = api.get(f"/apis/{group_version}") or {}
        out[group_version] = {str(r["kind"]): {
            "name": r.get("name"), "namespaced": bool(r.get("namespaced")), "preferred": group_version == preferred,
            "singular_name": r.get("singularName") or "", "short_names": r.get("shortNames") or [],
            "categories": r.get("categories") or []} for r in data.get("resources") or [] if "/" not in str(r.get("name"))}
    return out


def run(module: Any) -> None:
    """The module's work, given an AnsibleModule (or the action plugin's in-process stand-in for one)."""
    reads = module.params["reads"]
    keys = [r["key"] for r in reads]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        module.fail_json(msg=f"reads: each key once; {', '.join(twice)} is given more than once")
    api = JsonApi(connect(module))
    found: dict[str, list[dict]] = {}
    errors = in_parallel(lambda index: found.__setitem__(reads[index]["key"], read(api, reads[index])), range(len(reads)))
    if errors:
        index = min(errors)
        first, exc = reads[index], errors[index]
        path = resource_path(first["api_version"], first["resource"], first["namespace"], first["name"])
        status = api_status(exc)
        # Where no answer came, the server it could not reach (a kubeconfig's or K8S_AUTH_HOST's).
        where = f" from {api.server}" if status is None and api.server else ""
        module.fail_json(msg=f"reading {first['key']} ({path}){where} failed: {api_error(exc)}", key=first["key"], path=path,
                         status=status, server=api.server)
    out: dict[str, Any] = {"changed": False, "resources": {key: found[key] for key in keys}}
    groups = module.params["api_groups"]
    if groups:
        served: dict[str, dict[str, dict[str, Any]]] = {}
        version: dict[str, Any] = {}
        calls = [lambda: version.update(api.get("/version") or {})] + [
            (lambda group=group: served.__setitem__(group, group_kinds(api, group))) for group in groups]
        errors = in_parallel(lambda index: calls[index](), range(len(calls)))
        if errors:
            index = min(errors)
            path = "/version" if index == 0 else f"/apis/{groups[index - 1]}"
            module.fail_json(msg=f"reading {path} failed: {api_error(errors[index])}", path=path, status=api_status(errors[index]))
        out["apis"] = {gv: kinds for group in groups for gv, kinds in served[group].items()}
        out["version"] = {"server": {"kubernetes": version}}
    module.exit_json(**out)


def main() -> None:
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()

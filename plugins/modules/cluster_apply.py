#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_apply
short_description: Apply a list of Kubernetes objects server-side (or delete them), in one module run
version_added: 0.2.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Applies each object of O(objects) with a server-side apply (C(PATCH), C(application/apply-patch+yaml)) under
    O(field_manager), taking over fields another manager owns where O(force_conflicts) says so - what
    M(kubernetes.core.k8s) does with C(apply) and C(server_side_apply), in the API's plain JSON rather than through the
    client's typed and dynamic APIs (their import and the API discovery took most of a second of every run).
  - Namespaces and CRDs go first, one after the other, in the order given; the other objects then go in parallel. A
    custom object whose CRD is in the same list waits for the API server to serve its kind (up to 60 seconds).
  - An object counts as changed when the apply created it or changed anything but what the server and the controllers
    write (its status, resourceVersion, managedFields, generation).
  - In check mode each object is applied with the server's dry run (C(dryRun=All)), which tells what would change and
    refuses what the API server would refuse. An object whose namespace, or whose CRD, is not there yet cannot be
    dry-run (the server answers 404); it is reported in RV(not_dry_run), as a change.
  - With O(state=absent), each object of O(objects) that is there is deleted instead (by kind and name; what else the
    object says is not read), in parallel; one that is not there, or whose kind the server does not serve (a CRD
    removed), is left as it is. What M(kubernetes.core.k8s) does with C(state=absent), without its discovery of every API.
options:
  objects:
    description:
      - The objects, each with C(apiVersion), C(kind) and C(metadata.name), and C(metadata.namespace) where the kind is
        namespaced.
    type: list
    elements: dict
    default: []
  label_sets:
    description:
      - Node labels set before the first object is applied, in the same run (the DaemonSets among the objects read
        them), as M(gpuops.nvidia.node_labels) sets its O(gpuops.nvidia.node_labels#module:sets). The Nodes are listed
        once, and each Node that differs is patched once. A Node a set names that is not in the cluster fails the run
        before anything is labelled or applied.
      - RV(labelled) says what each set changed.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: What the set is; returned with its changed Nodes in RV(labelled.sets).
        type: str
      labels:
        description: Node name to the labels it should carry; a value of C(null) removes the label.
        type: dict
        required: true
      keep_existing:
        description: Label keys whose existing non-empty value wins over the one given.
        type: list
        elements: str
        default: []
  field_manager:
    description: The field manager the fields applied belong to.
    type: str
    default: gpuops-nvidia
  force_conflicts:
    description: Take over the fields another field manager owns (C(force=true)); without it such an apply fails.
    type: bool
    default: true
  state:
    description:
      - C(present) applies the objects; C(absent) deletes those that are there (not with O(label_sets)), with the API
        server's default propagation (what depends on them goes too), and does not wait for them to be gone.
    type: str
    choices: [present, absent]
    default: present
extends_documentation_fragment:
  - gpuops.nvidia.kube
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_cluster
  - gpuops.nvidia.attributes.in_process
attributes:
  check_mode:
    support: full
    details:
      - The API server's dry run of each apply; what cannot be dry-run yet is listed in RV(not_dry_run).
      - The Nodes' labels are compared as in a real run; nothing is patched.
      - With O(state=absent), the API server's dry run of each delete.
  diff_mode:
    support: full
    details:
      - Each created or changed object, before and after, without its status and the server's metadata; a Secret's
        values hidden.
      - The labels of each Node that changes, before and after.
      - With O(state=absent), each object deleted as it was before, and nothing after.
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Apply the device plugin's objects
  gpuops.nvidia.cluster_apply:
    objects: "{{ lookup('gpuops.nvidia.objects_template', 'objects.yml.j2') }}"
    field_manager: gpuops-nvidia

- name: Label the GPU node for the device plugin, then apply it
  gpuops.nvidia.cluster_apply:
    label_sets:
      - name: deploy labels
        labels: {gpu-node-1: {nvidia.com/gpu.deploy.device-plugin: "true"}}
        keep_existing: [nvidia.com/gpu.deploy.device-plugin]
    objects: "{{ lookup('gpuops.nvidia.objects_template', 'objects.yml.j2') }}"

- name: Remove the device plugin's DaemonSet, where it is still there
  gpuops.nvidia.cluster_apply:
    state: absent
    objects:
      - {apiVersion: apps/v1, kind: DaemonSet, metadata: {name: nvidia-device-plugin-daemonset, namespace: gpu-operator}}
"""

RETURN = r"""
results:
  description: Each object, in the order given, and what the apply did to it.
  returned: always
  type: list
  elements: dict
  sample: [{object: Namespace gpu-operator, result: unchanged}, {object: DaemonSet gpu-operator/nvidia-device-plugin-daemonset, result: changed}]
  contains:
    object:
      description: The object's kind and name (namespace/name for a namespaced one).
      type: str
    result:
      description:
        - C(created), C(changed), C(unchanged), or C(not dry-run) (check mode, its namespace or CRD not there yet, or
          for a binding, the role it binds, which the API server must read to check that an account that is not a
          superuser may bind it).
        - With O(state=absent), C(deleted) (in check mode, would be) or C(absent) (not there).
      type: str
not_dry_run:
  description: In check mode, the objects that could not be dry-run (kind and name), each counted as a change.
  returned: always
  type: list
  elements: str
labelled:
  description: What O(label_sets) changed.
  returned: always
  type: dict
  contains:
    changed_nodes:
      description: The Nodes patched (or, in check mode, that would be).
      type: list
      elements: str
    sets:
      description: For each set in its order, its O(label_sets[].name) and the Nodes whose labels it changes.
      type: list
      elements: dict
object:
  description: The object whose apply failed (kind and name).
  returned: failure of an apply
  type: str
status:
  description: The HTTP status the API server answered the failed call with, C(null) where none came (no connection).
  returned: failure of a call
  type: int
"""


import json
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.apply import (
    BINDING_KINDS,
    ROLE_KINDS,
    changed,
    check_objects,
    describe,
    phases,
    role_key,
    shown,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import (
    AUTH_ARGS,
    JsonApi,
    api_error,
    api_status,
    connect,
    in_parallel,
    resource_path,
    served_kinds,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.labels import SET_OPTIONS, LabelError, label, set_errors

APPLY = "application/apply-patch+yaml"
CRD_WAIT = 60.0
POLL = 0.5


class Failed(Exception):
    """An apply or a read that failed, with the object it was for."""

    def __init__(self, msg: str, obj: str | None, status: int | None) -> None:
        super().__init__(msg)
        self.msg, self.obj, self.status = msg, obj, status


class Applier:
    def __init__(self, api: JsonApi, objects: list[dict[str, Any]], params: dict[str, Any], check_mode: bool) -> None:
        self.api, self.objects, self.check_mode = api, objects, check_mode
        self.query = [("fieldManager", params["field_manager"])] + ([("force", "true")] if params["force_conflicts"] else [])
        self.query += [("dryRun", "All")] if check_mode else []
        self.served: dict[str, dict[str, dict[str, Any]]] = {}
        self.results: list[dict[str, str] | None] = [None] * len(objects)
        self.diffs: dict[int, dict[str, Any]] = {}
        self.missing_namespaces: set[str] = set()
        # Roles check mode created only in the server's dry run: a binding to one cannot be dry-run by a non-superuser.
        self.dry_run_roles: set[tuple[str, str, str]] = set()
        # The kinds this list's own CRDs define: apiVersion -> kinds.
        self.defined: dict[str, set[str]] = {}
        for obj in objects:
            if obj.get("kind") == "CustomResourceDefinition":
                spec = obj.get("spec") or {}
                for version in spec.get("versions") or []:
                    self.defined.setdefault(f"{spec.get('group')}/{version.get('name')}", set()).add(str((spec.get("names") or {}).get("kind")))

    def kinds(self, api_version: str, refresh: bool = False) -> dict[str, dict[str, Any]]:
        """The kinds the API server serves in an API version (its discovery document), by kind."""
        if refresh or api_version not in self.served:
            try:
                self.served[api_version] = served_kinds(self.api, api_version) or {}
            except Exception as exc:
                raise Failed(f"reading the kinds the API server serves in {api_version} failed: {api_error(exc)}", None, api_status(exc)) from exc
        return self.served[api_version]

    def resource(self, index: int) -> dict[str, Any] | None:
        """The resource of an object (its plural and whether it is namespaced); None in check mode for a kind only this
        list's CRDs define (it cannot be dry-run before they are there). Waits for a kind this list's CRDs define."""
        obj = self.objects[index]
        api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
        found = self.kinds(api_version).get(kind)
        if found is None and kind in self.defined.get(api_version, set()):
            if self.check_mode:
                return None
            deadline = time.monotonic() + CRD_WAIT
            while found is None and time.monotonic() < deadline:
                time.sleep(POLL)
                found = self.kinds(api_version, refresh=True).get(kind)
        if found is None:
            raise Failed(f"applying {describe(obj)} failed: the API server serves no kind {kind} in {api_version}"
                         f"{' (its CRD is in the list, but was not served within 60 seconds)' if kind in self.defined.get(api_version, set()) else ''}",
                         describe(obj), None)
        if found.get("namespaced") and not (obj.get("metadata") or {}).get("namespace"):
            raise Failed(f"applying {describe(obj)} failed: {kind} is namespaced, and the object has no metadata.namespace", describe(obj), None)
        return found

    def apply(self, index: int, found: dict[str, Any] | None) -> None:
        obj = self.objects[index]
        meta = obj["metadata"]
        namespace = meta.get("namespace") if found and found.get("namespaced") else None
        if found is None or namespace in self.missing_namespaces:
            self.results[index] = {"object": describe(obj), "result": "not dry-run"}
            return
        path = resource_path(str(obj["apiVersion"]), str(found["name"]), namespace, str(meta["name"]))
        try:
            before = self.api.get(path)
            after = self.api.call("PATCH", path, query=self.query, body=json.dumps(obj), content_type=APPLY)
        except Exception as exc:
            if self.check_mode and api_status(exc) == 404 and obj.get("kind") in BINDING_KINDS and role_key(obj) in self.dry_run_roles:
                # Its role is only dry-run created: the server cannot read it to check the caller may bind it.
                self.results[index] = {"object": describe(obj), "result": "not dry-run"}
                return
            raise Failed(f"applying {describe(obj)} failed: {api_error(exc)}", describe(obj), api_status(exc)) from exc
        result = "created" if before is None else "changed" if changed(before, after) else "unchanged"
        if self.check_mode and result == "created" and obj.get("kind") in ROLE_KINDS:
            self.dry_run_roles.add(role_key(obj))
        self.results[index] = {"object": describe(obj), "result": result}
        if result != "unchanged":
            self.diffs[index] = {"before_header": describe(obj), "after_header": describe(obj), "before": shown(before), "after": shown(after)}

    def delete(self, index: int) -> None:
        """Deletes the object where it is there (the server's dry run in check mode); its kind not served: not there."""
        obj = self.objects[index]
        meta = obj["metadata"]
        found = self.kinds(str(obj["apiVersion"])).get(str(obj["kind"]))
        result = "absent"
        if found is not None:
            namespace = meta.get("namespace") if found.get("namespaced") else None
            path = resource_path(str(obj["apiVersion"]), str(found["name"]), namespace, str(meta["name"]))
            try:
                before = self.api.get(path)
                if before is not None:
                    self.api.call("DELETE", path, query=[("dryRun", "All")] if self.check_mode else None)
                    result = "deleted"
                    self.diffs[index] = {"before_header": describe(obj), "after_header": describe(obj), "before": shown(before), "after": {}}
            except Exception as exc:
                if api_status(exc) != 404:  # gone meanwhile: what was wanted
                    raise Failed(f"deleting {describe(obj)} failed: {api_error(exc)}", describe(obj), api_status(exc)) from exc
                self.diffs.pop(index, None)
        self.results[index] = {"object": describe(obj), "result": result}

    def remove(self) -> None:
        """Deletes every object that is there, in parallel (the kinds each API version serves read once, first)."""
        for api_version in sorted({str(obj["apiVersion"]) for obj in self.objects}):
            self.kinds(api_version)
        errors = in_parallel(self.delete, range(len(self.objects)))
        if errors:
            index = min(errors)
            error = errors[index]
            if isinstance(error, Failed):
                raise error
            raise Failed(f"deleting {describe(self.objects[index])} failed: {api_error(error)}", describe(self.objects[index]), api_status(error))

    def run(self) -> None:
        if self.check_mode:
            for namespace in sorted({str(o["metadata"]["namespace"]) for o in self.objects if (o.get("metadata") or {}).get("namespace")}):
                try:
                    if self.api.get(resource_path("v1", "namespaces", name=namespace)) is None:
                        self.missing_namespaces.add(namespace)
                except Exception as exc:
                    raise Failed(f"reading namespace {namespace} failed: {api_error(exc)}", None, api_status(exc)) from exc
        first, roles, rest = phases(self.objects)
        for index in first:
            self.apply(index, self.resource(index))
        for group in (roles, rest):
            found = {index: self.resource(index) for index in group}

            def apply_one(index: int, found: dict[int, dict[str, Any] | None] = found) -> None:
                self.apply(index, found[index])

            errors = in_parallel(apply_one, group)
            if errors:
                index = min(errors)
                error = errors[index]
                if isinstance(error, Failed):
                    raise error
                raise Failed(f"applying {describe(self.objects[index])} failed: {api_error(error)}", describe(self.objects[index]),
                             api_status(error))


ARGUMENT_SPEC: dict[str, Any] = {
    "objects": {"type": "list", "elements": "dict", "default": []},
    "label_sets": {"type": "list", "elements": "dict", "default": [], "options": SET_OPTIONS},
    "field_manager": {"type": "str", "default": "gpuops-nvidia"},
    "force_conflicts": {"type": "bool", "default": True},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    **AUTH_ARGS,
}


def run(module: Any) -> None:
    """The module's work, given an AnsibleModule (or the action plugin's in-process stand-in for one)."""
    objects, sets = module.params["objects"], module.params["label_sets"]
    bad_objects = check_objects(objects)
    errors = (["objects: " + "; ".join(bad_objects)] if bad_objects else []) + set_errors(sets, "label_sets")
    if module.params["state"] == "absent" and sets:
        errors.append("label_sets: not with state absent (a label set to null is removed)")
    if errors:
        module.fail_json(msg="; ".join(errors))
    api = JsonApi(connect(module))
    if module.params["state"] == "absent":
        run_absent(module, Applier(api, objects, module.params, module.check_mode))
    try:
        labelled = label(api, sets, module.params["field_manager"], "fail", module.check_mode, module._diff)
    except LabelError as exc:
        module.fail_json(msg=exc.msg, labelled=exc.result)
        raise  # not reached: fail_json exits
    applier = Applier(api, objects, module.params, module.check_mode)
    out: dict[str, Any] = {"labelled": {key: labelled[key] for key in ("changed_nodes", "sets")}}
    try:
        applier.run()
    except Failed as exc:
        module.fail_json(msg=exc.msg, object=exc.obj, status=exc.status, results=[r for r in applier.results if r], **out)
    results = [r for r in applier.results if r]
    out.update({
        "changed": labelled["changed"] or any(r["result"] != "unchanged" for r in results),
        "results": results,
        "not_dry_run": [r["object"] for r in results if r["result"] == "not dry-run"],
    })
    diffs = ([{"before_header": "Node labels", "after_header": "Node labels", **labelled["diff"]}] if "diff" in labelled else []) + [
        applier.diffs[index] for index in sorted(applier.diffs)]
    if module._diff and diffs:
        out["diff"] = diffs
    module.exit_json(**out)


def run_absent(module: Any, applier: Applier) -> None:
    """State absent: the objects deleted, and what was deleted."""
    try:
        applier.remove()
    except Failed as exc:
        module.fail_json(msg=exc.msg, object=exc.obj, status=exc.status, results=[r for r in applier.results if r])
    results = [r for r in applier.results if r]
    out: dict[str, Any] = {"changed": any(r["result"] == "deleted" for r in results), "results": results, "not_dry_run": [],
                           "labelled": {"changed_nodes": [], "sets": []}}
    if module._diff and applier.diffs:
        out["diff"] = [applier.diffs[index] for index in sorted(applier.diffs)]
    module.exit_json(**out)


def main() -> None:
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a server-side apply of the cluster roles' objects decides without the API server: the order the objects
go in, what counts as a change, and how an object is shown in a diff.

No Kubernetes client here (module `cluster_apply` makes the calls), so all of it is unit-tested on plain dicts."""

from __future__ import annotations

import copy
from typing import Any

# Objects others depend on being served: a Namespace before what lives in it, a CRD before its custom objects. They go
# first, in the order given; then the RBAC roles, in parallel, before their bindings: the API server takes a binding
# from an account that is not a superuser (the deployer RBAC's) only once it can read the role it binds, to check the
# account holds the role's rights; everything else after them, in parallel (the API server takes a DaemonSet before
# its ServiceAccount: the controllers wait for it).
FIRST_KINDS = ("Namespace", "CustomResourceDefinition")
ROLE_KINDS = ("ClusterRole", "Role")
BINDING_KINDS = ("ClusterRoleBinding", "RoleBinding")

# Written by the server on every write, or by controllers: never what an apply changes.
VOLATILE_METADATA = ("resourceVersion", "managedFields", "generation", "creationTimestamp", "uid", "selfLink")
HIDDEN = "(hidden: a Secret's data)"


def describe(obj: dict[str, Any]) -> str:
    """Kind and name (namespace/name for a namespaced object), as the run reports an object."""
    meta = obj.get("metadata") or {}
    name = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
    return f"{obj.get('kind')} {name}"


def check_objects(objects: list[Any]) -> list[str]:
    """What is wrong with the objects given, each naming the object's position: the API server needs an apiVersion,
    a kind and a name for each (an apply sends one object at a time, to its own path)."""
    errors = []
    for index, obj in enumerate(objects):
        if not isinstance(obj, dict):
            errors.append(f"objects[{index}]: a mapping is needed, got {type(obj).__name__}")
            continue
        missing = [key for key, value in (("apiVersion", obj.get("apiVersion")), ("kind", obj.get("kind")),
                                          ("metadata.name", (obj.get("metadata") or {}).get("name"))) if not value]
        if missing:
            errors.append(f"objects[{index}] ({obj.get('kind') or 'no kind'}): {', '.join(missing)} missing")
    return errors


def phases(objects: list[dict[str, Any]]) -> tuple[list[int], list[int], list[int]]:
    """The positions of the objects to apply one after the other first (Namespaces, CRDs), of the roles (then, in
    parallel), and of the rest (last, in parallel)."""
    first = [i for i, obj in enumerate(objects) if obj.get("kind") in FIRST_KINDS]
    roles = [i for i, obj in enumerate(objects) if obj.get("kind") in ROLE_KINDS]
    return first, roles, [i for i in range(len(objects)) if i not in set(first) | set(roles)]


def role_key(obj: dict[str, Any]) -> tuple[str, str, str]:
    """A role's (kind, namespace, name); for a binding, those of the role it binds."""
    meta = obj.get("metadata") or {}
    if obj.get("kind") in BINDING_KINDS:
        ref = obj.get("roleRef") or {}
        kind = str(ref.get("kind"))
        return kind, str(meta.get("namespace") or "") if kind == "Role" else "", str(ref.get("name"))
    return str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name"))


def normalized(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """The object without what the server or its controllers write (status, resourceVersion, managedFields...): two
    reads of an object nobody applied to compare equal, and an apply that changed something does not."""
    if obj is None:
        return None
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in VOLATILE_METADATA:
            meta.pop(key, None)
    return out


def shown(obj: dict[str, Any] | None) -> dict[str, Any]:
    """An object for a diff: normalized, a Secret's values hidden."""
    out = normalized(obj) or {}
    if out.get("kind") == "Secret":
        for key in ("data", "stringData"):
            if isinstance(out.get(key), dict):
                out[key] = dict.fromkeys(out[key], HIDDEN)
    return out


def changed(before: dict[str, Any] | None, after: dict[str, Any] | None) -> bool:
    """Whether the apply created the object or changed it (a real apply, or the server's dry run of one)."""
    return before is None or normalized(before) != normalized(after)

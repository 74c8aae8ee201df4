"""roles/cluster_common/files/deployer-rbac.yml, the least an account needs to run the cluster roles, covers what every
role's templates apply: the API server lets an account create a ClusterRole or Role only with rights it holds itself
(cluster-wide for a ClusterRole, in the namespace for a Role), and create/patch on every kind a role applies.
The lab proves the same on the API server: the cluster scenario's limited runs (molecule/cluster/limited.yml) and the
DRA and driver-container lab tests run cluster.yml as a ServiceAccount bound to this file only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
DEPLOYER = REPO / "roles/cluster_common/files/deployer-rbac.yml"
TEMPLATES = sorted(REPO.glob("roles/*/templates/objects.yml.j2"))

# kind -> (API group, resource, cluster-scoped) for every kind a role's template applies.
KINDS = {
    "Namespace": ("", "namespaces", True),
    "RuntimeClass": ("node.k8s.io", "runtimeclasses", True),
    "ClusterRole": ("rbac.authorization.k8s.io", "clusterroles", True),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io", "clusterrolebindings", True),
    "DeviceClass": ("resource.k8s.io", "deviceclasses", True),
    "CustomResourceDefinition": ("apiextensions.k8s.io", "customresourcedefinitions", True),
    "Secret": ("", "secrets", False),
    "ServiceAccount": ("", "serviceaccounts", False),
    "ConfigMap": ("", "configmaps", False),
    "Service": ("", "services", False),
    "DaemonSet": ("apps", "daemonsets", False),
    "Deployment": ("apps", "deployments", False),
    "Role": ("rbac.authorization.k8s.io", "roles", False),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings", False),
    "ServiceMonitor": ("monitoring.coreos.com", "servicemonitors", False),
    "ResourceClaimTemplate": ("resource.k8s.io", "resourceclaimtemplates", False),
}
# What applying takes (cluster_apply reads, then creates or patches); roles that remove their objects on a switch
# (cluster_common's remove step: device plugin <-> DRA, the driver container's pools) delete them too.
APPLY = {"get", "list", "create", "patch"}
REMOVES = {p.parts[-3] for p in REPO.glob("roles/*/tasks/*.yml") if "tasks_from: remove\n" in p.read_text()}
# Kinds a role applies and never removes: a CRD (the dra role's ComputeDomain CRDs), whose deletion would delete every
# object of its kind in the cluster. test_crds_are_never_removed holds the roles to it.
NEVER_REMOVED = {"CustomResourceDefinition"}

_RULE = re.compile(r"^\s*- (\{apiGroups: .*\})\s*$")
_KIND = re.compile(r"^  kind: (\w+)\s*$")


def _grants(rules: list[dict]) -> set[tuple[str, str, str, str]]:
    """(group, resource, verb, resourceName or '') for each right the rules give."""
    out = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        out.add((group, resource, verb, name))
    return out


def _holds(grants: set, right: tuple[str, str, str, str]) -> bool:
    group, resource, verb, name = right
    return any((group, resource, v, n) in grants for v in (verb, "*") for n in (name, ""))


@pytest.fixture(scope="module")
def deployer():
    roles = {item["metadata"]["name"]: _grants(item["rules"]) for item in yaml.safe_load(DEPLOYER.read_text())["items"]}
    cluster = roles["gpuops-nvidia-deployer"]  # bound with a ClusterRoleBinding
    dra = roles["gpuops-nvidia-deployer-dra"]  # the same, where the GPUs are scheduled with DRA
    namespaced = roles["gpuops-nvidia-deployer-namespace"]  # a RoleBinding in the GPU namespace
    return {"cluster": cluster, "namespaced": cluster | namespaced, "dra": dra}


def _held(deployer: dict, template: Path) -> tuple[set, set]:
    """What the deployer holds cluster-wide and in the GPU namespace when it runs this template's role."""
    extra = deployer["dra"] if template.parent.parent.name == "dra" else set()
    return deployer["cluster"] | extra, deployer["namespaced"] | extra


def _template_objects(path: Path) -> tuple[list[str], list[tuple[str, dict]]]:
    """The kinds a template applies, and each RBAC rule with the kind of role (ClusterRole or Role) it is in."""
    kinds, rules, current = [], [], None
    for line in path.read_text().splitlines():
        if m := _KIND.match(line):
            kinds.append(m.group(1))
            current = m.group(1)
        elif (m := _RULE.match(line)) and current in ("ClusterRole", "Role"):
            rules.append((current, yaml.safe_load(m.group(1))))
    return kinds, rules


def test_the_templates_are_read():
    assert {"device_plugin", "dra", "driver_container"} == REMOVES
    names = {p.parent.parent.name for p in TEMPLATES}
    assert {"device_plugin", "dra", "driver_container", "mig_manager", "gpu_feature_discovery", "node_feature_discovery"} <= names
    assert sum(len(_template_objects(p)[1]) for p in TEMPLATES) > 30


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.parent.parent.name)
def test_the_deployer_holds_every_right_a_role_grants(deployer, template):
    cluster, namespaced = _held(deployer, template)
    missing = []
    for kind, rule in _template_objects(template)[1]:
        held = cluster if kind == "ClusterRole" else namespaced
        missing += [f"{kind}: {right}" for right in sorted(_grants([rule])) if not _holds(held, right)]
    assert not missing, f"{DEPLOYER.name} cannot grant what {template.parent.parent.name} grants: {missing}"


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.parent.parent.name)
def test_the_deployer_may_apply_and_remove_every_kind_a_role_applies(deployer, template):
    cluster, namespaced = _held(deployer, template)
    missing = []
    for kind in _template_objects(template)[0]:
        assert kind in KINDS, f"{template}: kind {kind} unknown to this test: add it to KINDS"
        group, resource, scoped = KINDS[kind]
        held = cluster if scoped else namespaced
        verbs = APPLY | ({"delete"} if template.parent.parent.name in REMOVES and kind not in NEVER_REMOVED else set())
        missing += [f"{kind}: {verb}" for verb in sorted(verbs) if not _holds(held, (group, resource, verb, ""))]
    assert not missing, f"{DEPLOYER.name} cannot apply what {template.parent.parent.name} applies: {sorted(set(missing))}"


def test_crds_are_never_removed():
    """The roles that remove objects name no CRD among them (their vars and tasks), and the deployer may not delete one."""
    named = [str(p.relative_to(REPO)) for role in sorted(REMOVES) for p in sorted((REPO / "roles" / role).glob("*/*.yml"))
             if p.parent.name in ("vars", "tasks", "defaults") and "CustomResourceDefinition" in p.read_text()]
    assert named == []
    roles = yaml.safe_load(DEPLOYER.read_text())["items"]
    assert not any(_holds(_grants(r["rules"]), ("apiextensions.k8s.io", "customresourcedefinitions", "delete", "")) for r in roles)
    # The dra role applies the ComputeDomain CRDs: the deployer may create and patch them.
    kinds = _template_objects(REPO / "roles/dra/templates/objects.yml.j2")[0]
    assert kinds.count("CustomResourceDefinition") == 2

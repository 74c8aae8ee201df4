"""Whether an nfd-master in the cluster would publish GFD's labels (module_utils/cluster/nfd.py)."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import nfd


def deployment(args=None, image="registry.k8s.io/nfd/node-feature-discovery:v0.19.0", configmap="nfd-master-conf",
               command=("nfd-master",)):
    return {
        "metadata": {"name": "nfd-master", "namespace": "node-feature-discovery"},
        "spec": {"template": {"spec": {
            "containers": [{"name": "master", "image": image, "command": list(command), "args": list(args or []),
                            "volumeMounts": [{"name": "conf", "mountPath": "/etc/kubernetes/node-feature-discovery"}]}],
            "volumes": [{"name": "conf", "configMap": {"name": configmap}}],
        }}},
    }


def reasons(dep, conf=None, ns_labels=None):
    found = nfd.master(dep, {"nfd-master-conf": {"nfd-master.conf": conf}} if conf is not None else {}, yaml.safe_load)
    return nfd.drops_gfd_labels(found, ns_labels or {"kubernetes.io/metadata.name": "gpu-operator"})


def test_a_default_nfd_master_publishes_nvidia_labels():
    # Only kubernetes.io namespaces are denied by default: nvidia.com needs no extraLabelNs.
    assert reasons(deployment()) == []
    assert reasons(deployment(), "extraLabelNs: [nvidia.com]\n") == []


def test_the_gpu_operator_charts_shape_is_recognised():
    dep = deployment(command=("nfd-master",), args=["-crd-controller=true", "-metrics=8081"])
    assert nfd.is_master(dep)
    assert not nfd.is_master({"spec": {"template": {"spec": {"containers": [{"command": ["nginx"]}]}}}})


@pytest.mark.parametrize(("conf", "args", "needle"), [
    ("denyLabelNs: [nvidia.com]\n", [], "denies the nvidia.com label namespace"),
    ("denyLabelNs: ['*.com']\n", [], "denyLabelNs ['*.com']"),
    (None, ["-deny-label-ns=*.com,foo.io"], "denies the nvidia.com label namespace"),
    ("labelWhiteList: '^feature'\n", [], "drops GFD's ['gpu.product'"),
    (None, ["-label-whitelist", "cpu-.*"], "labelWhiteList 'cpu-.*'"),
    ("noPublish: true\n", [], "noPublish"),
    (None, ["-no-publish"], "noPublish"),
    ("restrictions:\n  denyNodeFeatureLabels: true\n", [], "restrictions.denyNodeFeatureLabels"),
    ("restrictions:\n  disableLabels: true\n", [], "restrictions.disableLabels"),
    ("restrictions:\n  nodeFeatureNamespaceSelector: {matchLabels: {nfd: allowed}}\n", [], "GFD's namespace"),
])
def test_configs_that_drop_gfds_labels_are_named(conf, args, needle):
    out = reasons(deployment(args), conf)
    assert len(out) == 1 and needle in out[0], out
    assert out[0].startswith("nfd-master node-feature-discovery/nfd-master ")


def test_denied_then_allowed_again_and_whitelists_that_match_pass():
    assert reasons(deployment(), "denyLabelNs: ['*.com']\nextraLabelNs: [nvidia.com]\n") == []
    assert reasons(deployment(["-extra-label-ns=nvidia.com"]), "denyLabelNs: [nvidia.com]\n") == []
    assert reasons(deployment(), "labelWhiteList: '.*'\n") == []
    # The flag overrides the file, as in nfd-master.
    assert reasons(deployment(["-no-publish=false"]), "noPublish: true\n") == []
    selector = "restrictions:\n  nodeFeatureNamespaceSelector: {matchLabels: {nfd: allowed}}\n"
    assert reasons(deployment(), selector, {"nfd": "allowed"}) == []


def test_a_release_without_the_nodefeature_api_by_default_is_named():
    out = reasons(deployment(image="k8s.gcr.io/nfd/node-feature-discovery:v0.12.1"))
    assert len(out) == 1 and "before v0.14" in out[0]


def test_a_config_file_elsewhere_is_read_from_its_mount():
    dep = deployment(["-config=/etc/nfd/master.yaml"])
    dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "conf", "mountPath": "/etc/nfd"}]
    found = nfd.master(dep, {"nfd-master-conf": {"master.yaml": "noPublish: true\n"}}, yaml.safe_load)
    assert found["config"] == {"noPublish": True}

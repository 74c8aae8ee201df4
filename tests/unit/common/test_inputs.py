"""The input_errors filter: each kind accepts what the tools accept and names the variable, value and rule."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.inputs import input_errors


@pytest.mark.parametrize(("value", "kind"), [
    ("nvcr.io/nvidia/k8s-device-plugin", "image_repository"),
    ("registry.k8s.io/nfd/node-feature-discovery", "image_repository"),
    ("127.0.0.1:5000/nvidia/k8s-device-plugin", "image_repository"),
    ("[::1]:5000/mirror/dcgm-exporter", "image_repository"),
    ("k8s-device-plugin", "image_repository"),
    ("v0.20.0", "image_tag"),
    ("4.6.0-4.8.3-distroless", "image_tag"),
    ("sha256:" + "a" * 64, "image_tag"),
    ("nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04", "image_reference"),
    ("nvcr.io/nvidia/cuda@sha256:" + "0" * 64, "image_reference"),
    ("nvcr.io/nvidia", "registry"),
    ("registry.example.com:5000/mirror/nvidia", "registry"),
    ("localhost:5000", "registry"),
    ("gpu-operator", "dns_label"),
    ("nvidia", "dns_subdomain"),
    ("nvidia.cdi", "dns_subdomain"),
    (9400, "port"),
    ("65535", "port"),
    ("https://nvidia.github.io/libnvidia-container/stable/deb", "url"),
    ("http://127.0.0.1:8461", "url"),
    ("file:///srv/mirror/libnvidia-container", "url"),
])
def test_accepted(value, kind):
    assert input_errors({"v": [value, kind]}) == []


@pytest.mark.parametrize(("value", "kind", "message"), [
    # A registry with a trailing space passed check mode and the server's dry run; pods could not pull.
    ("nvcr.io/nvidia /k8s-device-plugin", "image_repository", r'^v: "nvcr.io/nvidia /k8s-device-plugin" is not an image name'),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "image_repository",
     r"carries a tag or digest; give the image without it \(nvcr.io/nvidia/k8s-device-plugin\) and the tag in the version"),
    ("NVCR.io/Nvidia/Plugin", "image_repository", r"is not an image name"),
    ("https://nvcr.io/nvidia/k8s-device-plugin", "image_repository", r"is not an image name"),
    ("", "image_repository", r"is not an image name"),
    ("v0.20.0 ", "image_tag", r'^v: "v0.20.0 " is not an image tag'),
    (".hidden", "image_tag", r"is not an image tag"),
    ("x" * 129, "image_tag", r"is not an image tag"),
    ("nvcr.io/nvidia/cuda", "image_reference", r"has no tag or digest"),
    ("nvcr.io/nvidia/cuda:12.9 ", "image_reference", r"is not an image reference"),
    ("nvcr.io/nvidia ", "registry", r'^v: "nvcr.io/nvidia " is not a registry'),
    ("https://nvcr.io", "registry", r"is not a registry"),
    ("nvcr.io/nvidia/", "registry", r"is not a registry"),
    ("GPU-Operator", "dns_label", r"is not a DNS-1123 label"),
    ("gpu_operator", "dns_label", r"is not a DNS-1123 label"),
    ("Nvidia", "dns_subdomain", r"is not a DNS-1123 subdomain"),
    (70000, "port", r"^v: 70000 is not a port \(a whole number from 1 to 65535\)"),
    (0, "port", r"is not a port"),
    (True, "port", r"is not a port"),
    ("94OO", "port", r"is not a port"),
    ("127.0.0.1:8461", "url", r'^v: "127.0.0.1:8461" is not a URL \(http:// or https:// with a host'),
    ("http://127.0.0.1:8461 ", "url", r"is not a URL"),
    ("ftp://mirror/deb", "url", r"is not a URL"),
])
def test_refused_naming_the_variable(value, kind, message):
    errors = input_errors({"v": [value, kind]})
    assert len(errors) == 1
    assert __import__("re").search(message, errors[0]), errors[0]


def test_kubeconfig_and_context(tmp_path):
    good = tmp_path / "config"
    good.write_text("apiVersion: v1\nkind: Config\ncontexts:\n- name: lab\n  context: {cluster: lab, user: lab}\n")
    bad = tmp_path / "bad"
    bad.write_text("contexts: [\n")
    assert input_errors({"k": [str(good), "kubeconfig"], "c": ["lab", "kube_context", str(good)]}) == []
    assert input_errors({"k": [str(tmp_path), "kubeconfig"]}) == [f'k: "{tmp_path}" is a directory, not a kubeconfig file']
    assert input_errors({"k": [str(tmp_path / "nope"), "kubeconfig"]}) == [f'k: "{tmp_path}/nope" does not exist on the controller']
    assert "does not parse as YAML" in input_errors({"k": [str(bad), "kubeconfig"]})[0]
    assert input_errors({"c": ["prod", "kube_context", str(good)]}) == [f'c: "prod" is not a context of {good} (it has lab)']
    # Not set: the defaults (K8S_AUTH_*, ~/.kube/config, in-cluster) apply, nothing to say; an unreadable
    # kubeconfig is reported by its own check, not again by the context's.
    assert input_errors({"k": ["", "kubeconfig"], "c": ["", "kube_context", str(good)]}) == []
    assert input_errors({"c": ["prod", "kube_context", str(bad)]}) == []


def test_a_caller_mistake_is_a_type_error():
    with pytest.raises(TypeError, match="unknown kind"):
        input_errors({"v": ["x", "colour"]})
    with pytest.raises(TypeError, match="expected \\[value, kind\\]"):
        input_errors({"v": "x"})

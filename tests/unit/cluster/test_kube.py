"""How the cluster modules connect: kubernetes.core's options and K8S_AUTH_* variables (AWX's credentials)."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import kube
from kubernetes import config as k8s_config

# What AWX's "OpenShift or Kubernetes API Bearer Token" credential puts in the environment.
AWX = {"K8S_AUTH_HOST": "https://10.0.0.1:6443/", "K8S_AUTH_API_KEY": "tok3n", "K8S_AUTH_VERIFY_SSL": "True",
       "K8S_AUTH_SSL_CA_CERT": "/runner/env/ca.crt"}


def bearer(cfg):
    """The Authorization header the client will send."""
    return cfg.auth_settings()["BearerToken"]["value"]


def params(**given):
    out = {name: None for name in kube.AUTH_ARGS}
    out.update(given)
    return out


@pytest.fixture
def kubeconfig(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "a", "cluster": {"server": "https://from-kubeconfig:6443", "insecure-skip-tls-verify": True}},
                     {"name": "b", "cluster": {"server": "https://context-b:6443"}}],
        "users": [{"name": "u", "user": {"token": "kubeconfig-token"}}],
        "contexts": [{"name": "a", "context": {"cluster": "a", "user": "u"}},
                     {"name": "b", "context": {"cluster": "b", "user": "u"}}],
    }))
    return str(path)


@pytest.fixture
def no_incluster(monkeypatch):
    calls = []

    def refuse(**_kw):
        calls.append(1)
        raise k8s_config.ConfigException("not in a pod")
    monkeypatch.setattr(kube.k8s_config, "load_incluster_config", refuse)
    return calls


def test_awx_bearer_token_credential_alone_connects_without_a_kubeconfig(monkeypatch, no_incluster):
    def no_kubeconfig(**_kw):
        raise AssertionError("a kubeconfig was read")
    monkeypatch.setattr(kube.k8s_config, "load_kube_config", no_kubeconfig)
    auth = kube.auth_settings(params(), AWX)
    assert auth == {"host": "https://10.0.0.1:6443", "api_key": "tok3n", "validate_certs": True,
                    "ca_cert": "/runner/env/ca.crt"}
    cfg = kube.api_client(auth).configuration
    assert cfg.host == "https://10.0.0.1:6443"
    assert bearer(cfg) == "Bearer tok3n"
    assert cfg.verify_ssl is True and cfg.ssl_ca_cert == "/runner/env/ca.crt"
    assert no_incluster == []


def test_options_win_over_the_environment_and_bools_read_as_kubernetes_core_reads_them():
    auth = kube.auth_settings(params(api_key="given"), {**AWX, "K8S_AUTH_VERIFY_SSL": "no"})
    assert auth["api_key"] == "given" and auth["validate_certs"] is False
    assert kube.auth_settings(params(validate_certs=True), {"K8S_AUTH_VALIDATE_CERTS": "false"})["validate_certs"] is True
    # The option's own name is read first, then the client attribute's (CA_CERT before SSL_CA_CERT).
    env = {"K8S_AUTH_CA_CERT": "/a", "K8S_AUTH_SSL_CA_CERT": "/b", "K8S_AUTH_CERT_FILE": "/c", "K8S_AUTH_KEY_FILE": "/k"}
    auth = kube.auth_settings(params(), env)
    assert auth == {"ca_cert": "/a", "client_cert": "/c", "client_key": "/k"}


def test_a_token_with_a_host_is_enough_but_a_token_alone_is_not():
    assert kube.self_sufficient({"host": "https://h", "api_key": "t"})
    assert kube.self_sufficient({"host": "https://h", "username": "u", "password": "p"})
    assert kube.self_sufficient({"host": "https://h", "client_cert": "/c", "client_key": "/k"})
    assert not kube.self_sufficient({"api_key": "t"})
    assert not kube.self_sufficient({"host": "https://h", "username": "u"})


def test_kubeconfig_and_context_from_the_environment(kubeconfig, no_incluster):
    cfg = kube.api_client(kube.auth_settings(params(), {"K8S_AUTH_KUBECONFIG": kubeconfig, "K8S_AUTH_CONTEXT": "b"})).configuration
    assert cfg.host == "https://context-b:6443"
    assert bearer(cfg) == "Bearer kubeconfig-token"
    assert no_incluster == []  # a kubeconfig named is read without trying the in-cluster account


def test_given_options_override_what_the_kubeconfig_loaded(kubeconfig, no_incluster):
    cfg = kube.api_client(kube.auth_settings(params(kubeconfig=kubeconfig, host="https://override:6443/",
                                                    validate_certs=False), {})).configuration
    assert cfg.host == "https://override:6443" and cfg.verify_ssl is False
    assert bearer(cfg) == "Bearer kubeconfig-token"
    given = kube.api_client(kube.auth_settings(params(kubeconfig=kubeconfig, api_key="given"), {})).configuration
    assert bearer(given) == "Bearer given"


def test_a_kubeconfig_given_as_a_mapping(kubeconfig):
    with open(kubeconfig, encoding="utf-8") as fh:
        as_dict = yaml.safe_load(fh)
    cfg = kube.api_client(kube.auth_settings(params(kubeconfig=as_dict, context="b"), {})).configuration
    assert cfg.host == "https://context-b:6443"


def test_nothing_given_tries_the_in_cluster_account_then_the_default_kubeconfig(monkeypatch, kubeconfig, no_incluster):
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.setattr(k8s_config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
    cfg = kube.api_client(kube.auth_settings(params(), {})).configuration
    assert no_incluster == [1]
    assert cfg.host == "https://from-kubeconfig:6443"


def test_in_cluster_account_is_used_first_as_kubernetes_core_does(monkeypatch, kubeconfig):
    def incluster(client_configuration):
        client_configuration.host = "https://kubernetes.default.svc"
    monkeypatch.setattr(kube.k8s_config, "load_incluster_config", incluster)
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    assert kube.api_client(kube.auth_settings(params(), {})).configuration.host == "https://kubernetes.default.svc"


def test_proxy_and_impersonation(monkeypatch):
    env = {**AWX, "K8S_AUTH_PROXY": "http://proxy:3128", "K8S_AUTH_NO_PROXY": "10.0.0.1",
           "K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH": "u:p", "K8S_AUTH_IMPERSONATE_USER": "ops",
           "K8S_AUTH_IMPERSONATE_GROUPS": "gpu-admins,"}
    client = kube.api_client(kube.auth_settings(params(), env))
    cfg = client.configuration
    assert cfg.proxy == "http://proxy:3128" and cfg.no_proxy == "10.0.0.1"
    assert cfg.proxy_headers["proxy-authorization"].startswith("Basic ")
    assert client.default_headers["Impersonate-User"] == "ops"
    assert client.default_headers["Impersonate-Group"] == "gpu-admins"


def test_more_than_one_impersonated_group_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="impersonate_groups: one group at most"):
        kube.api_client(kube.auth_settings(params(impersonate_groups=["a", "b"]), AWX))


def test_every_module_accepts_the_whole_option_set():
    from ansible_collections.gpuops.nvidia.plugins.modules import gpu_validation, node_labels
    for module in (gpu_validation, node_labels):
        doc = yaml.safe_load(module.DOCUMENTATION)
        assert "gpuops.nvidia.kube" in doc["extends_documentation_fragment"]
    from ansible_collections.gpuops.nvidia.plugins.doc_fragments.kube import ModuleDocFragment
    documented = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    assert set(documented) == set(kube.AUTH_ARGS)
    for name, spec in kube.AUTH_ARGS.items():
        assert documented[name]["type"] == spec["type"], name
        assert documented[name].get("aliases", []) == spec.get("aliases", []), name


def test_the_options_are_kubernetes_cores_so_module_defaults_and_awx_credentials_serve_both():
    """The collection no longer depends on kubernetes.core, but speaks its connection options: the same names, types,
    aliases and no_log (the tests' environment has the collection, tests/requirements.yml)."""
    args_common = pytest.importorskip("ansible_collections.kubernetes.core.plugins.module_utils.args_common")
    theirs = args_common.AUTH_ARG_SPEC
    assert set(kube.AUTH_ARGS) == set(theirs)
    for name, spec in theirs.items():
        ours = kube.AUTH_ARGS[name]
        assert ours["type"] == spec.get("type", "str"), name
        assert ours.get("aliases", []) == spec.get("aliases", []), name
        assert bool(ours.get("no_log")) == bool(spec.get("no_log")), name
        assert ours.get("elements") == spec.get("elements"), name
    assert kube.AUTH_ARGS["proxy_headers"]["options"] == args_common.AUTH_PROXY_HEADERS_SPEC

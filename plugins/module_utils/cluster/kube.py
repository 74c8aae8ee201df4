# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes client of the collection's cluster modules: one place that connects, with the options and
the environment of kubernetes.core (kubeconfig and context, or host and a bearer token, certificates, proxy,
impersonation; each also from its K8S_AUTH_* variable), so `module_defaults` set once and an AWX credential
serve both alike."""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import kube_http
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube_common import WORKERS, in_parallel, selector_matches

# Imported only where a connection needs the client (kube_http says which): the import alone took 1 to 4 s of every
# module run on a 2-core machine.
k8s_client: Any = LazyModule("kubernetes.client")
k8s_config: Any = LazyModule("kubernetes.config")

__all__ = ["AUTH_ARGS", "STRATEGIC_MERGE", "JsonApi", "api_client", "api_error", "api_status", "auth_settings",
           "connect", "in_parallel", "resource_path", "selector_matches", "self_sufficient", "served_kinds"]

# Lists of object metadata only (PartialObjectMetadataList), a page at a time.
METADATA = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
PAGE = 500
# The patch the typed client sent for a mapping (kubectl's default too): a null removes a key, lists merge by their keys.
STRATEGIC_MERGE = "application/strategic-merge-patch+json"

_PROXY_HEADERS: dict[str, Any] = {
    "proxy_basic_auth": {"type": "str", "no_log": True},
    "basic_auth": {"type": "str", "no_log": True},
    "user_agent": {"type": "str"},
}
# kubernetes.core's connection options (its AUTH_ARG_SPEC), so that the same module_defaults serve both.
AUTH_ARGS: dict[str, dict[str, Any]] = {
    "kubeconfig": {"type": "raw", "no_log": True},
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "username": {"type": "str"},
    "password": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"]},
    "client_cert": {"type": "path", "aliases": ["cert_file"]},
    "client_key": {"type": "path", "aliases": ["key_file"]},
    "proxy": {"type": "str"},
    "no_proxy": {"type": "str"},
    "proxy_headers": {"type": "dict", "options": _PROXY_HEADERS},
    "persist_config": {"type": "bool"},
    "impersonate_user": {"type": "str"},
    "impersonate_groups": {"type": "list", "elements": "str"},
}

# Option -> the kubernetes client Configuration attribute it sets; each option is also read, when not
# given, from K8S_AUTH_<OPTION> or K8S_AUTH_<ATTRIBUTE> (K8S_AUTH_VERIFY_SSL, K8S_AUTH_SSL_CA_CERT: AWX's
# bearer-token credential), as kubernetes.core reads them.
_CONFIG_ATTR = {
    "kubeconfig": "kubeconfig", "context": "context", "host": "host", "api_key": "api_key",
    "username": "username", "password": "password", "validate_certs": "verify_ssl", "ca_cert": "ssl_ca_cert",
    "client_cert": "cert_file", "client_key": "key_file", "proxy": "proxy", "no_proxy": "no_proxy",
    "persist_config": "persist_config",
}
_FALSE = ("0", "false", "no")


def auth_settings(params: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """The connection settings, by option name: each given option, else its K8S_AUTH_* variable."""
    auth: dict[str, Any] = {}
    for option, attr in _CONFIG_ATTR.items():
        value = params.get(option)
        if value is None:
            value = environ.get(f"K8S_AUTH_{option.upper()}") or environ.get(f"K8S_AUTH_{attr.upper()}")
            if value is not None and AUTH_ARGS[option].get("type") == "bool":
                value = value.lower() not in _FALSE
        if value is not None:
            auth[option] = value
    headers: dict[str, Any] = params.get("proxy_headers") or {
        key: environ[f"K8S_AUTH_PROXY_HEADERS_{key.upper()}"] for key in _PROXY_HEADERS
        if f"K8S_AUTH_PROXY_HEADERS_{key.upper()}" in environ}
    if any(v is not None for v in headers.values()):
        auth["proxy_headers"] = {k: v for k, v in headers.items() if v is not None}
    for option in ("impersonate_user", "impersonate_groups"):
        value = params.get(option)
        if value is None and environ.get(f"K8S_AUTH_{option.upper()}"):
            text = environ[f"K8S_AUTH_{option.upper()}"]
            value = [x for x in text.split(",") if x] if option == "impersonate_groups" else text
        if value:
            auth[option] = value
    if auth.get("host"):
        auth["host"] = str(auth["host"]).rstrip("/")
    return auth


def self_sufficient(auth: dict[str, Any]) -> bool:
    """Whether the options alone authenticate (no kubeconfig, no in-cluster account read), as kubernetes.core decides."""
    return bool(auth.get("host")) and any(all(auth.get(k) for k in keys)
                                          for keys in (("api_key",), ("username", "password"), ("client_cert", "client_key")))


def _load_kubeconfig(auth: dict[str, Any], cfg: Any) -> None:
    kubeconfig = auth.get("kubeconfig")
    extra = {"context": auth.get("context"), "persist_config": bool(auth.get("persist_config"))}
    if isinstance(kubeconfig, dict):
        k8s_config.load_kube_config_from_dict(config_dict=kubeconfig, client_configuration=cfg, **extra)
    else:
        k8s_config.load_kube_config(config_file=os.path.expanduser(kubeconfig) if kubeconfig else None,
                                    client_configuration=cfg, **extra)


def api_client(auth: dict[str, Any]) -> Any:
    """A configured ApiClient, chosen as kubernetes.core chooses: the options alone when they authenticate
    (host and a token, a user and password, or a client certificate); else the kubeconfig or context named;
    else the in-cluster service account, then $KUBECONFIG / ~/.kube/config. The options given override what
    was loaded (the host, the CA, validate_certs...)."""
    cfg = k8s_client.Configuration()
    if self_sufficient(auth):
        pass
    elif auth.get("kubeconfig") or auth.get("context"):
        _load_kubeconfig(auth, cfg)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except k8s_config.ConfigException:
            _load_kubeconfig(auth, cfg)
    for option, attr in _CONFIG_ATTR.items():
        if option in ("kubeconfig", "context", "persist_config") or option not in auth:
            continue
        if option == "api_key":
            # The key a kubeconfig's token is loaded under, so a token given replaces it (and no refresh
            # hook of the kubeconfig's user puts that user's token back).
            cfg.api_key = {"BearerToken": f"Bearer {auth[option]}"}
            cfg.refresh_api_key_hook = None
        else:
            setattr(cfg, attr, auth[option])
    if auth.get("proxy_headers"):
        import urllib3
        cfg.proxy_headers = urllib3.util.make_headers(**auth["proxy_headers"])
    # Calls made in parallel (a thousand nodes' patches) each need a connection of their own.
    cfg.connection_pool_maxsize = WORKERS * 2
    client = k8s_client.ApiClient(cfg)
    if auth.get("impersonate_user"):
        client.set_default_header("Impersonate-User", auth["impersonate_user"])
    if auth.get("impersonate_groups"):
        # The Python client sends one value per header name, and the API server reads one group per header.
        if len(auth["impersonate_groups"]) > 1:
            raise ValueError(f"impersonate_groups: one group at most, got {auth['impersonate_groups']} "
                             "(the Python client sends a single Impersonate-Group header)")
        client.set_default_header("Impersonate-Group", auth["impersonate_groups"][0])
    return client


def connect(module: Any) -> Any:
    """The connection for the module's options and K8S_AUTH_* variables: plain HTTPS where kube_http can make it, else
    the kubernetes client's ApiClient; fails the module when it cannot have one."""
    auth = auth_settings(module.params, os.environ)
    try:
        conf = kube_http.settings(auth, os.environ, self_sufficient(auth))
        if conf is not None:
            return kube_http.HttpClient(conf)
    except Exception as exc:  # a CA or client certificate ssl cannot read
        module.fail_json(msg=f"cannot reach the cluster: {exc}")
    try:
        import kubernetes  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        # Not a server that cannot be reached: this connection (an exec or auth-provider user, a proxy, the in-cluster
        # account, ...) is one only the kubernetes client makes, and it is not installed for this Python.
        module.fail_json(msg=f"the kubernetes Python library is not installed for {sys.executable}, and this connection needs it "
                             "(an exec or auth-provider user, a proxy, the in-cluster account, or a kubeconfig plain HTTPS "
                             "cannot read): install it on the controller (pip install kubernetes) "
                             "or in the execution environment",
                         missing_library="kubernetes", exception=traceback.format_exc())
    try:
        return api_client(auth)
    except Exception as exc:  # a kubeconfig that cannot be read, no in-cluster account
        module.fail_json(msg=f"cannot reach the cluster: {exc}")
        raise  # not reached: fail_json exits


def api_status(exc: Exception) -> int | None:
    """The HTTP status the API server answered with; None where no answer came (no connection)."""
    return getattr(exc, "status", None)


def api_error(exc: Exception) -> str:
    """The API server's own message, when it sent one."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except ValueError:
            return str(body)
    return str(exc)


class JsonApi:
    """Plain JSON calls through the connection connect() made: kube_http's, or the kubernetes client's (its
    authentication, TLS and proxy settings)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def server(self) -> str:
        """The API server's URL, for messages (a refused connection names it)."""
        client = self.client
        if isinstance(client, kube_http.HttpClient):
            return client.server
        return str(getattr(getattr(client, "configuration", None), "host", "") or "")

    def call(self, method: str, path: str, *, query: list | None = None, body: Any = None,
             accept: str = "application/json", content_type: str = "application/json") -> Any:
        data = self.raw(method, path, query=query, body=body, accept=accept, content_type=content_type)
        return json.loads(data) if data else {}

    def raw(self, method: str, path: str, *, query: list | None = None, body: Any = None,
            accept: str = "application/json", content_type: str = "application/json") -> bytes:
        """The answer's body as the server sent it (a pod's log is plain text); the API error for a status outside 2xx."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        client = self.client
        if isinstance(client, kube_http.HttpClient):
            return client.request(method, path, query, headers, body)
        if hasattr(client, "param_serialize"):  # the client generated since kubernetes 34
            request = client.param_serialize(method, path, query_params=query or [], header_params=headers, body=body,
                                             auth_settings=["BearerToken"])
            response = client.call_api(*request)
            response.read()
            if not 200 <= response.status <= 299:
                client.response_deserialize(response, {})  # raises the ApiException, with the status and the server's body
        else:
            response = client.call_api(path, method, query_params=query or [], header_params=headers, body=body,
                                       auth_settings=["BearerToken"], _return_http_data_only=True, _preload_content=False)
        return bytes(response.data or b"")

    def get(self, path: str, query: list | None = None) -> dict | None:
        """The object (or list, or document) at path; None where the server answers 404."""
        try:
            return self.call("GET", path, query=query)
        except Exception as exc:
            if api_status(exc) != 404:
                raise
            return None

    def list_items(self, path: str, query: list | None = None, accept: str = "application/json") -> list[dict]:
        """Every item of a list, a page at a time (a thousand Nodes' objects need not come in one answer)."""
        items: list[dict] = []
        token = ""
        while True:
            page = self.call("GET", path, query=list(query or []) + [("limit", PAGE)] + ([("continue", token)] if token else []),
                             accept=accept)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def list_metadata(self, path: str) -> list[dict]:
        return [item.get("metadata") or {} for item in self.list_items(path, accept=METADATA)]


def served_kinds(api: JsonApi, api_version: str) -> dict[str, dict[str, Any]] | None:
    """The kinds the API server serves in an API version (its discovery document: each kind's resource, its plural
    `name`, and whether it is `namespaced`), by kind; None where the server does not serve that version."""
    data = api.get("/api/v1" if api_version == "v1" else f"/apis/{api_version}")
    if data is None:
        return None
    return {str(r["kind"]): r for r in data.get("resources") or [] if "/" not in str(r.get("name"))}


def resource_path(api_version: str, resource: str, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a resource (plural, lower case) of an API version, in a namespace or not, one object or all."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return base + (f"/namespaces/{namespace}" if namespace else "") + f"/{resource}" + (f"/{name}" if name else "")

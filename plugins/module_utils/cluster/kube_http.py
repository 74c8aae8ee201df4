# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""The API server over plain HTTPS, for the connections that need nothing of the kubernetes client.

The fast backend of the collection's one client (kube.JsonApi), the kubernetes client being the fallback. Importing
the kubernetes package (its config loader and client) took 0.36 to 0.54 s (medians) of a module process on the lab's 2-core
machine, and only a connection made here lets the action plugins run a cluster module in the task's own process: 0.1 s
a task instead of 0.7 to 1.2 s with the client (docs/bench.md, "One client path"). The collection's modules speak
plain JSON to the API server, so the common connections go without it: a kubeconfig (file, mapping,
$KUBECONFIG or ~/.kube/config) whose context has a server, a CA (file or data) or insecure-skip-tls-verify, and a
client certificate and key (file or data) or a token (or tokenFile); or kubernetes.core's options with a host and a
token or client certificate (AWX's bearer-token credential). Each option given overrides what the kubeconfig has, as
kube.api_client does.

Anything else goes to the kubernetes client, unchanged (settings() returns None): exec and auth-provider users (EKS,
GKE, OIDC), user names and passwords, proxies (options, the kubeconfig's proxy-url, or the environment's for this
server), tls-server-name, more than one kubeconfig in $KUBECONFIG, the in-cluster service account, a kubeconfig that
does not parse, names a context, cluster or user it lacks, or has keys not listed here. So the client's own errors and
behaviour stay for every case this does not know.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

_CLUSTER_KEYS = {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify", "extensions"}
_USER_KEYS = {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token", "tokenFile",
              "extensions"}
_FALLBACK_OPTIONS = ("username", "password", "proxy", "proxy_headers")


class HttpApiError(Exception):
    """An answer outside 2xx, with what kube.api_status and kube.api_error read from the client's ApiException."""

    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"({status})\nReason: {reason}\nHTTP response body: {body}")
        self.status = status
        self.reason = reason
        self.body = body


def _named(entries: Any, name: Any) -> Mapping | None:
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    return None


def _file_or_data(section: Mapping, key: str, base: str) -> tuple[str | None, bytes | None]:
    """(path, data) of a kubeconfig's file-or-data pair; a relative path is relative to the kubeconfig's directory."""
    data = section.get(f"{key}-data")
    if data:
        return None, base64.b64decode(str(data))
    path = section.get(key)
    if path:
        path = os.path.expanduser(str(path))
        return (path if os.path.isabs(path) else os.path.join(base, path)), None
    return None, None


def _kubeconfig(auth: dict[str, Any], environ: Mapping[str, str]) -> tuple[dict, str] | None:
    """(kubeconfig, the directory its relative paths are read from), or None for the client's own reading."""
    given = auth.get("kubeconfig")
    if isinstance(given, Mapping):
        return dict(given), os.getcwd()
    path = given or environ.get("KUBECONFIG") or "~/.kube/config"
    path = os.path.expanduser(str(path))
    if os.pathsep in path:
        return None  # several kubeconfigs, merged by the client
    try:
        import yaml  # pylint: disable=import-outside-toplevel
        with open(path, encoding="utf-8") as fh:
            config = yaml.safe_load(fh)
    except Exception:  # missing, unreadable, not YAML: the client says so in its words
        return None
    return (config, os.path.dirname(os.path.abspath(path))) if isinstance(config, dict) else None


def settings(auth: dict[str, Any], environ: Mapping[str, str], self_sufficient: bool) -> dict[str, Any] | None:
    """The connection as plain settings (server, verify, ca_file, ca_data, cert_file, key_file, cert_data, key_data,
    token, headers), or None where the kubernetes client must make it."""
    if any(auth.get(k) for k in _FALLBACK_OPTIONS) or len(auth.get("impersonate_groups") or []) > 1:
        return None
    out: dict[str, Any] = {"server": None, "verify": True, "ca_file": None, "ca_data": None, "cert_file": None,
                           "key_file": None, "cert_data": None, "key_data": None, "token": None}
    if not self_sufficient:
        if not (auth.get("kubeconfig") or auth.get("context")) and environ.get("KUBERNETES_SERVICE_HOST"):
            return None  # in a pod: the client tries the in-cluster account first
        loaded = _kubeconfig(auth, environ)
        if loaded is None:
            return None
        config, base = loaded
        context = _named(config.get("contexts"), auth.get("context") or config.get("current-context"))
        context = context.get("context") if context else None
        if not isinstance(context, Mapping):
            return None
        cluster = (_named(config.get("clusters"), context.get("cluster")) or {}).get("cluster")
        user = (_named(config.get("users"), context.get("user")) or {}).get("user") or {}
        if not isinstance(cluster, Mapping) or not isinstance(user, Mapping) or not cluster.get("server"):
            return None
        if set(cluster) - _CLUSTER_KEYS or set(user) - _USER_KEYS:
            return None
        out["server"] = str(cluster["server"])
        out["verify"] = not cluster.get("insecure-skip-tls-verify")
        if out["server"].startswith("https"):
            out["ca_file"], out["ca_data"] = _file_or_data(cluster, "certificate-authority", base)
            out["cert_file"], out["cert_data"] = _file_or_data(user, "client-certificate", base)
            out["key_file"], out["key_data"] = _file_or_data(user, "client-key", base)
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token_file = os.path.expanduser(str(user["tokenFile"]))
            try:
                with open(token_file if os.path.isabs(token_file) else os.path.join(base, token_file), encoding="utf-8") as fh:
                    token = fh.read()
            except OSError:
                return None
        out["token"] = str(token).strip() if token else None
    # The options given override what the kubeconfig set.
    if auth.get("host"):
        out["server"] = str(auth["host"])
    if auth.get("api_key"):
        out["token"] = str(auth["api_key"])
    if auth.get("validate_certs") is not None:
        out["verify"] = bool(auth["validate_certs"])
    if auth.get("ca_cert"):
        out["ca_file"], out["ca_data"] = auth["ca_cert"], None
    if auth.get("client_cert"):
        out["cert_file"], out["cert_data"] = auth["client_cert"], None
    if auth.get("client_key"):
        out["key_file"], out["key_data"] = auth["client_key"], None
    server = urllib.parse.urlsplit(str(out["server"] or ""))
    if server.scheme not in ("http", "https") or not server.hostname:
        return None
    proxies = urllib.request.getproxies_environment()
    if proxies.get(server.scheme) and not urllib.request.proxy_bypass_environment(server.hostname, proxies):  # type: ignore[attr-defined]
        return None
    out["server"] = str(out["server"]).rstrip("/")
    headers = {}
    if out["token"]:
        headers["Authorization"] = f"Bearer {out['token']}"
    if auth.get("impersonate_user"):
        headers["Impersonate-User"] = str(auth["impersonate_user"])
    if auth.get("impersonate_groups"):
        headers["Impersonate-Group"] = str(auth["impersonate_groups"][0])
    out["headers"] = headers
    return out


def _ssl_context(conf: dict[str, Any]) -> ssl.SSLContext:
    ca_data = conf["ca_data"].decode() if conf["ca_data"] else None
    context = ssl.create_default_context(cafile=conf["ca_file"], cadata=ca_data)
    if not conf["verify"]:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if conf["cert_data"] or conf["key_data"]:
        # ssl reads a certificate chain from files only: written to a private directory, read, and removed.
        with tempfile.TemporaryDirectory(prefix="gpuops-kube-") as tmp:
            _load_cert_chain(context, _private_file(tmp, "cert.pem", conf["cert_data"]) or conf["cert_file"],
                             _private_file(tmp, "key.pem", conf["key_data"]) or conf["key_file"])
    else:
        _load_cert_chain(context, conf["cert_file"], conf["key_file"])
    return context


def _private_file(directory: str, name: str, data: bytes | None) -> str | None:
    """data written to directory/name, readable by this user only; None without data."""
    if not data:
        return None
    path = os.path.join(directory, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as fh:
        fh.write(data)
    return path


def _load_cert_chain(context: ssl.SSLContext, cert: str | None, key: str | None) -> None:
    if cert:
        context.load_cert_chain(cert, key)


class HttpClient:
    """JSON requests to one API server: one kept-alive connection per thread (JsonApi's calls run in parallel)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.server = str(conf["server"])
        url = urllib.parse.urlsplit(conf["server"])
        self.https = url.scheme == "https"
        self.host = url.hostname or ""
        self.port = url.port or (443 if self.https else 80)
        self.prefix = url.path.rstrip("/")
        self.context = _ssl_context(conf) if self.https else None
        self.headers = dict(conf["headers"])
        self._local = threading.local()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        conn = (http.client.HTTPSConnection(self.host, self.port, context=self.context) if self.https
                else http.client.HTTPConnection(self.host, self.port))
        self._local.conn = conn
        return conn, False

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def request(self, method: str, path: str, query: list | None, headers: dict[str, str], body: Any) -> bytes:
        """The answer's body; HttpApiError for a status outside 2xx, OSError where no answer came."""
        url = self.prefix + path + ("?" + urllib.parse.urlencode([(k, str(v)) for k, v in query]) if query else "")
        payload = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
        if isinstance(payload, str):
            payload = payload.encode()
        while True:
            conn, reused = self._connection()
            try:
                conn.request(method, url, body=payload, headers={**self.headers, **headers})
                response = conn.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop()
                if reused:
                    continue  # the server closed a kept-alive connection: once more on a new one, as urllib3 does
                raise
            except Exception:
                self._drop()
                raise
            if response.will_close:
                self._drop()
            if not 200 <= response.status <= 299:
                raise HttpApiError(response.status, response.reason, data.decode(errors="replace"))
            return data

"""The cluster modules' connection without the kubernetes client (kube_http), and what it leaves to the client.

TLS with client certificates and a CA file, tokens the API server refuses and a server that does not answer are the
lab's: every cluster test connects through this to a real kube-apiserver (tests/integration)."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import kube, kube_http


def params(**given):
    out = {name: None for name in kube.AUTH_ARGS}
    out.update(given)
    return out


def settings(env=None, **given):
    auth = kube.auth_settings(params(**given), env or {})
    return kube_http.settings(auth, env or {}, kube.self_sufficient(auth))


def write_config(tmp_path, cluster=None, user=None, name="kubeconfig", **more):
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "a",
              "clusters": [{"name": "c", "cluster": cluster or {"server": "https://api:6443", "certificate-authority": "ca.crt"}}],
              "users": [{"name": "u", "user": {"token": "t0ken"} if user is None else user}],
              "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}], **more}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch):
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)


def test_a_kubeconfig_with_a_ca_file_and_a_token_connects_directly(tmp_path):
    conf = settings(kubeconfig=write_config(tmp_path))
    # A relative path is relative to the kubeconfig's directory, as the client reads it.
    assert conf["server"] == "https://api:6443" and conf["ca_file"] == str(tmp_path / "ca.crt")
    assert conf["verify"] is True and conf["headers"] == {"Authorization": "Bearer t0ken"}


def test_data_fields_token_file_and_insecure(tmp_path):
    (tmp_path / "token").write_text("from-file\n")
    user = {"client-certificate-data": base64.b64encode(b"CERT").decode(), "client-key-data": base64.b64encode(b"KEY").decode(),
            "tokenFile": "token"}
    cluster = {"server": "https://api:6443/", "certificate-authority-data": base64.b64encode(b"CA").decode(),
               "insecure-skip-tls-verify": True}
    conf = settings(kubeconfig=write_config(tmp_path, cluster, user))
    assert conf["server"] == "https://api:6443"
    assert (conf["ca_data"], conf["cert_data"], conf["key_data"]) == (b"CA", b"CERT", b"KEY")
    assert conf["verify"] is False and conf["headers"]["Authorization"] == "Bearer from-file"


def test_the_context_named_and_the_options_given_win(tmp_path):
    path = write_config(tmp_path)
    with open(path, encoding="utf-8") as fh:
        config = yaml.safe_load(fh)
    config["clusters"].append({"name": "d", "cluster": {"server": "http://other:8080"}})
    config["contexts"].append({"name": "b", "context": {"cluster": "d", "user": "u"}})
    conf = settings(kubeconfig=config, context="b")
    assert conf["server"] == "http://other:8080" and conf["ca_file"] is None
    conf = settings(kubeconfig=path, host="https://override:6443/", api_key="given", validate_certs=False, ca_cert="/etc/ca.pem",
                    impersonate_user="ops", impersonate_groups=["gpu-admins"])
    assert conf["server"] == "https://override:6443" and conf["verify"] is False and conf["ca_file"] == "/etc/ca.pem"
    assert conf["headers"] == {"Authorization": "Bearer given", "Impersonate-User": "ops", "Impersonate-Group": "gpu-admins"}


def test_awx_bearer_token_credential_connects_directly():
    env = {"K8S_AUTH_HOST": "https://10.0.0.1:6443/", "K8S_AUTH_API_KEY": "tok3n", "K8S_AUTH_VERIFY_SSL": "True",
           "K8S_AUTH_SSL_CA_CERT": "/runner/env/ca.crt"}
    conf = settings(env)
    assert conf["server"] == "https://10.0.0.1:6443" and conf["ca_file"] == "/runner/env/ca.crt"
    assert conf["headers"] == {"Authorization": "Bearer tok3n"}


def test_the_default_kubeconfig_comes_from_the_environment(tmp_path):
    assert settings({"KUBECONFIG": write_config(tmp_path)})["server"] == "https://api:6443"


EXEC = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws", "args": ["eks", "get-token"]}}


@pytest.mark.parametrize(("case", "make"), [
    ("an exec user (EKS)", lambda p: {"kubeconfig": write_config(p, user=EXEC)}),
    ("an auth-provider user", lambda p: {"kubeconfig": write_config(p, user={"auth-provider": {"name": "oidc"}})}),
    ("a user name and password", lambda p: {"kubeconfig": write_config(p, user={"username": "a", "password": "b"})}),
    ("a password option", lambda p: {"kubeconfig": write_config(p), "username": "a", "password": "b"}),
    ("a proxy option", lambda p: {"kubeconfig": write_config(p), "proxy": "http://proxy:3128"}),
    ("the kubeconfig's proxy-url", lambda p: {"kubeconfig": write_config(p, {"server": "https://api:6443", "proxy-url": "http://p:1"})}),
    ("tls-server-name", lambda p: {"kubeconfig": write_config(p, {"server": "https://api:6443", "tls-server-name": "x"})}),
    ("two impersonated groups", lambda p: {"kubeconfig": write_config(p), "impersonate_groups": ["a", "b"]}),
    ("a context it lacks", lambda p: {"kubeconfig": write_config(p), "context": "nope"}),
    ("a kubeconfig that does not exist", lambda p: {"kubeconfig": str(p / "missing")}),
    ("a kubeconfig that is not YAML", lambda p: {"kubeconfig": str((p / "bad").write_text("{") and p / "bad")}),
    ("no server", lambda p: {"kubeconfig": write_config(p, {"certificate-authority": "ca.crt"})}),
])
def test_what_it_does_not_know_goes_to_the_kubernetes_client(tmp_path, case, make):
    assert settings(**make(tmp_path)) is None, case


def test_several_kubeconfigs_the_in_cluster_account_and_an_environment_proxy_go_to_the_client(tmp_path):
    path = write_config(tmp_path)
    assert settings({"KUBECONFIG": f"{path}:{path}"}) is None
    assert settings({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}) is None
    # A kubeconfig named is read before the in-cluster account, as the client does.
    assert settings({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, kubeconfig=path)["server"] == "https://api:6443"


def test_an_environment_proxy_for_this_server_goes_to_the_client_and_no_proxy_keeps_it_direct(tmp_path, monkeypatch):
    path = write_config(tmp_path)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert settings(kubeconfig=path) is None
    monkeypatch.setenv("NO_PROXY", "api")
    assert settings(kubeconfig=path)["server"] == "https://api:6443"


class _Server(ThreadingHTTPServer):
    daemon_threads = True


@pytest.fixture
def api_server():
    seen: list[dict] = []
    closes = {"next": False}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # http.server's name
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "thread": threading.get_ident()})
            if self.path.startswith("/api/v1/namespaces/missing"):
                self._answer(404, {"kind": "Status", "message": 'namespaces "missing" not found', "code": 404})
            else:
                self._answer(200, {"kind": "Namespace", "metadata": {"name": "gpu-operator"}})
            if closes["next"]:
                closes["next"] = False
                self.close_connection = True

        def do_PATCH(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"path": self.path, "type": self.headers["Content-Type"], "body": json.loads(body)})
            self._answer(200, json.loads(body))

        def log_message(self, *_args):
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen, closes
    server.shutdown()
    server.server_close()


def test_json_calls_errors_and_a_closed_connection(api_server, tmp_path):
    url, seen, closes = api_server
    client = kube_http.HttpClient(settings(kubeconfig=write_config(tmp_path, {"server": url + "/"})))
    api = kube.JsonApi(client)
    assert api.get("/api/v1/namespaces/gpu-operator", [("labelSelector", "a=b,c")])["metadata"]["name"] == "gpu-operator"
    assert seen[-1] == {"path": "/api/v1/namespaces/gpu-operator?labelSelector=a%3Db%2Cc", "auth": "Bearer t0ken",
                        "thread": seen[-1]["thread"]}
    assert api.get("/api/v1/namespaces/missing") is None
    with pytest.raises(kube_http.HttpApiError) as err:
        api.call("GET", "/api/v1/namespaces/missing")
    assert kube.api_status(err.value) == 404 and kube.api_error(err.value) == 'namespaces "missing" not found'
    # The server closes the connection after an answer: the next call opens another.
    closes["next"] = True
    api.get("/api/v1/namespaces/gpu-operator")
    assert api.get("/api/v1/namespaces/gpu-operator")["kind"] == "Namespace"
    patched = api.call("PATCH", "/api/v1/nodes/n1", body={"metadata": {"labels": {"a": None}}}, content_type=kube.STRATEGIC_MERGE)
    assert patched == {"metadata": {"labels": {"a": None}}} and seen[-1]["type"] == kube.STRATEGIC_MERGE
    applied = api.call("PATCH", "/api/v1/nodes/n1", body=json.dumps({"kind": "Node"}), content_type="application/apply-patch+yaml")
    assert applied == {"kind": "Node"}


def test_calls_in_parallel_each_on_a_connection_of_their_own(api_server, tmp_path):
    url, _seen, _closes = api_server
    api = kube.JsonApi(kube_http.HttpClient(settings(kubeconfig=write_config(tmp_path, {"server": url}))))
    found: dict[int, str] = {}
    errors = kube.in_parallel(lambda i: found.__setitem__(i, api.get("/api/v1/namespaces/gpu-operator")["kind"]), range(40))
    assert errors == {} and set(found.values()) == {"Namespace"} and len(found) == 40


def test_a_server_that_does_not_answer_has_no_status():
    client = kube_http.HttpClient({**settings(host="http://127.0.0.1:9", api_key="t")})
    with pytest.raises(OSError) as err:
        kube.JsonApi(client).get("/api/v1/namespaces/x")
    assert kube.api_status(err.value) is None

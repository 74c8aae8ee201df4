# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The connection options of the modules that talk to the API server (module_utils/kube.py)."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig, or a kubeconfig as a dictionary. Also read from E(K8S_AUTH_KUBECONFIG).
      - As kubernetes.core chooses, what connects is O(host) with O(api_key) (or O(username) and O(password), or
        O(client_cert) and O(client_key)) when they are given; else this kubeconfig or O(context); else the
        in-cluster service account, then E(KUBECONFIG) or C(~/.kube/config). The options given override what was loaded.
    type: raw
  context:
    description: The kubeconfig context to use. Also read from E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description: The API server URL. Also read from E(K8S_AUTH_HOST), which AWX's Kubernetes bearer-token credential sets.
    type: str
  api_key:
    description: A bearer token (a ServiceAccount's, for example). Also read from E(K8S_AUTH_API_KEY).
    type: str
  username:
    description: A user for basic authentication. Also read from E(K8S_AUTH_USERNAME).
    type: str
  password:
    description: The password for O(username). Also read from E(K8S_AUTH_PASSWORD).
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's certificate. Also read from E(K8S_AUTH_VALIDATE_CERTS) or
        E(K8S_AUTH_VERIFY_SSL) (C(0), C(false) and C(no) are false).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: The CA certificate file that signed the API server's. Also read from E(K8S_AUTH_CA_CERT) or E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description: A client certificate file. Also read from E(K8S_AUTH_CLIENT_CERT) or E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description: The key of O(client_cert). Also read from E(K8S_AUTH_CLIENT_KEY) or E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  proxy:
    description: An HTTP proxy URL to reach the API server through. Also read from E(K8S_AUTH_PROXY).
    type: str
  no_proxy:
    description: Hosts to reach without the proxy, comma-separated. Also read from E(K8S_AUTH_NO_PROXY).
    type: str
  proxy_headers:
    description: Headers for the proxy. Also read from E(K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH) and the like.
    type: dict
    suboptions:
      proxy_basic_auth:
        description: C(user:password) for the proxy.
        type: str
      basic_auth:
        description: C(user:password) sent as basic authentication.
        type: str
      user_agent:
        description: The User-Agent header.
        type: str
  persist_config:
    description: Whether a refreshed token is written back to the kubeconfig. Also read from E(K8S_AUTH_PERSIST_CONFIG).
    type: bool
  impersonate_user:
    description: The user to act as. Also read from E(K8S_AUTH_IMPERSONATE_USER).
    type: str
  impersonate_groups:
    description:
      - The group to act as (one; the Python client sends a single Impersonate-Group header). Also read from
        E(K8S_AUTH_IMPERSONATE_GROUPS).
    type: list
    elements: str
requirements:
  - kubernetes (the Python client) on the host the module runs on, for the connections the notes name
notes:
  - A kubeconfig with a server, a CA (or insecure-skip-tls-verify) and a client certificate or token, or O(host) with
    O(api_key) or a client certificate, connects with Python's own HTTPS, without importing the kubernetes client
    (which took seconds of every run). Everything else (exec and auth-provider users such as EKS's, user names and
    passwords, proxies, tls-server-name, the in-cluster account) connects through the kubernetes client, as before.
"""

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes client of the collection's cluster modules: one place that connects, with the same
options as kubernetes.core (kubeconfig, context), so `module_defaults` set once serve both."""

from __future__ import annotations

import traceback

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    ApiException = Exception  # type: ignore[assignment,misc]

AUTH_ARGS = {
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
}


def api_client(kubeconfig: str | None, context: str | None):
    """A configured ApiClient: the kubeconfig named (or $KUBECONFIG / ~/.kube/config), else in-cluster."""
    if kubeconfig or context:
        return k8s_config.new_client_from_config(config_file=kubeconfig, context=context)
    try:
        return k8s_config.new_client_from_config()
    except k8s_config.ConfigException:
        k8s_config.load_incluster_config()
        return k8s_client.ApiClient()


def api_error(exc: Exception) -> str:
    """The API server's own message, when it sent one."""
    body = getattr(exc, "body", None)
    if body:
        try:
            import json
            return str(json.loads(body).get("message") or body)
        except ValueError:
            return str(body)
    return str(exc)

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes client of the collection's cluster modules: one place that connects, with the same
options as kubernetes.core (kubeconfig, context), so `module_defaults` set once serve both."""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

    class ApiException(Exception):  # type: ignore[no-redef]
        """Stands in while the kubernetes client is missing (connect() fails before any call): nothing raises it."""

__all__ = ["AUTH_ARGS", "ApiException", "api_error", "connect", "in_parallel"]

AUTH_ARGS = {
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
}


# Calls made in parallel (a thousand nodes' patches) each need a connection of their own.
WORKERS = 16

T = TypeVar("T")


def api_client(kubeconfig: str | None, context: str | None) -> Any:
    """A configured ApiClient: the kubeconfig named (or $KUBECONFIG / ~/.kube/config), else in-cluster."""
    cfg = k8s_client.Configuration()
    if kubeconfig or context:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    else:
        try:
            k8s_config.load_kube_config(client_configuration=cfg)
        except k8s_config.ConfigException:
            k8s_config.load_incluster_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = WORKERS * 2
    return k8s_client.ApiClient(cfg)


def in_parallel(call: Callable[[T], object], items: Iterable[T]) -> dict[T, Exception]:
    """call(item) for every item on WORKERS threads; returns {item: exception} for the calls that raised."""
    from concurrent.futures import ThreadPoolExecutor

    def run(item: T) -> tuple[T, Exception | None]:
        try:
            call(item)
            return item, None
        except Exception as exc:  # reported to the caller, item by item
            return item, exc

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return {item: exc for item, exc in pool.map(run, items) if exc is not None}


def connect(module: Any) -> Any:
    """The ApiClient for the module's kubeconfig and context; fails the module when it cannot have one."""
    if not HAS_KUBERNETES:
        from ansible.module_utils.basic import missing_required_lib
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    try:
        return api_client(module.params["kubeconfig"], module.params["context"])
    except Exception as exc:  # a kubeconfig that cannot be read, no in-cluster account
        module.fail_json(msg=f"cannot reach the cluster: {exc}")
        raise  # not reached: fail_json exits


def api_error(exc: Exception) -> str:
    """The API server's own message, when it sent one."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except ValueError:
            return str(body)
    return str(exc)

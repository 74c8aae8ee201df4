"""Every role's own input checks, as its meta/inputs.yml declares them, on the role's defaults with one mistake each:
the exact messages (the roles' messages before the checks moved out of Jinja, word for word). And every check a
declaration makes is needed by some case here: a declaration without it fails one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.nvidia.plugins.action.role_inputs import ROLES, declaration_path, rule
from ansible_collections.gpuops.nvidia.plugins.filter.cluster import cluster_nodes
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import inputs

REPO = Path(__file__).resolve().parents[3]
DECLARED = sorted(p.parent.parent.name for p in ROLES.glob("*/meta/inputs.yml"))

TAG = "is not an image tag (letters, digits, _ . -, at most 128, not starting with . or -) or digest (sha256:<hex>)"
NAME = ("is not an image name: lower-case path components separated by /, after an optional registry host (no spaces, no upper "
        "case, no scheme), e.g. nvcr.io/nvidia/k8s-device-plugin")
URL = "is not a URL (http:// or https:// with a host, or file:/// with a path, no spaces)"
PORT = "is not a port (a whole number from 1 to 65535)"
KNOWN_MIG = ("(known: all-1g.10gb, all-1g.10gb.me, all-1g.20gb, all-2g.20gb, all-3g.40gb, all-4g.40gb, all-7g.80gb, all-balanced, "
             "all-disabled, all-enabled)")


def tagged(image: str) -> str:
    name = image.split("@")[0]
    name = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return f"carries a tag or digest; give the image without it ({name}) and the tag in the version variable"


def sharing(replicas: int) -> dict:
    return {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}}}


KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab"}}],
              "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:6443"}}], "users": [{"name": "lab", "user": {}}]}

# (case, role, variables set, the role's own messages). `__nodes` names a set of GPU nodes (below) as cluster_common reads
# them; `kubeconfig` stands for the path of a kubeconfig with one context, lab.
CASES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    # cluster_common (its settings entry point)
    ("shared settings", "cluster_common", {
        "gpuops_cluster_namespace": "GPU-Operator", "gpuops_cluster_runtime_class": "Nvidia", "gpuops_cluster_registry": "nvcr.io/nvidia ",
        "gpuops_cluster_driver_wait_image": "nvcr.io/nvidia/k8s-device-plugin"}, [
        'gpuops_cluster_namespace: "GPU-Operator" is not a DNS-1123 label (lower-case letters, digits and -, at most 63, starting and '
        "ending alphanumeric)",
        'gpuops_cluster_runtime_class: "Nvidia" is not a DNS-1123 subdomain (lower-case letters, digits, - and ., at most 253, each '
        "part starting and ending alphanumeric)",
        'gpuops_cluster_registry: "nvcr.io/nvidia " is not a registry (a host with an optional port and path, no scheme, no spaces, '
        "no trailing /), e.g. nvcr.io/nvidia or registry.example.com:5000/mirror/nvidia",
        'gpuops_cluster_driver_wait_image: "nvcr.io/nvidia/k8s-device-plugin" has no tag or digest; name the one to run '
        "(…:tag or …@sha256:<hex>)"]),
    ("kubeconfig missing", "cluster_common", {"gpuops_cluster_kubeconfig": "/nonexistent/kubeconfig"},
     ['gpuops_cluster_kubeconfig: "/nonexistent/kubeconfig" does not exist on the controller']),
    ("kubeconfig a directory", "cluster_common", {"gpuops_cluster_kubeconfig": "/tmp"},
     ['gpuops_cluster_kubeconfig: "/tmp" is a directory, not a kubeconfig file']),
    ("context of the kubeconfig", "cluster_common", {"gpuops_cluster_kubeconfig": "kubeconfig", "gpuops_cluster_context": "lab"}, []),
    ("context not in the kubeconfig", "cluster_common", {"gpuops_cluster_kubeconfig": "kubeconfig", "gpuops_cluster_context": "prod"},
     ['gpuops_cluster_context: "prod" is not a context of kubeconfig (it has lab)']),
    ("context not in $KUBECONFIG", "cluster_common", {"gpuops_cluster_context": "prod", "$KUBECONFIG": "kubeconfig"},
     ['gpuops_cluster_context: "prod" is not a context of kubeconfig (it has lab)']),
    ("NRI mode with CDI off", "cluster_common", {"gpuops_cluster_nri": True, "gpuops_device_plugin_cdi": "false"},
     ['gpuops_device_plugin_cdi: "false" turns CDI off, and NRI mode (gpuops_cluster_nri: true) injects CDI devices: use auto '
      "or true"]),
    ("NRI mode with CDI auto", "cluster_common", {"gpuops_cluster_nri": True}, []),
    # cluster_prereqs
    ("empty group", "cluster_prereqs", {"gpuops_cluster_nodes_group": "nogroup", "__nodes": "handlers"},
     ["gpuops_cluster_nodes_group: group nogroup has no hosts"]),
    ("handlers", "cluster_prereqs", {"__nodes": "handlers"},
     ["the hosts report different runtime handlers nvidia, nvidia-cdi; one RuntimeClass has one handler: set "
      "gpuops_cluster_prereqs_runtime_handler"]),
    ("handler set", "cluster_prereqs", {"__nodes": "handlers", "gpuops_cluster_prereqs_runtime_handler": "nvidia"}, []),
    ("NRI hosts, cluster not", "cluster_prereqs", {"__nodes": "nri_modes"},
     ["gpuops_cluster_nri: false, and GPU hosts run NRI mode (gpuops_container_toolkit_mode: nri): a100; they have no nvidia "
      "runtime for the RuntimeClass the cluster roles use; accepted: gpuops_cluster_nri: true"]),
    # A host that leaves the mode unset (t4) is not known here.
    ("NRI cluster, hosts not", "cluster_prereqs", {"__nodes": "nri_modes", "gpuops_cluster_nri": True},
     ["gpuops_cluster_nri: true, and GPU hosts set another gpuops_container_toolkit_mode: l40s (cdi); there no NRI plugin gives "
      "the operands their devices; accepted: gpuops_container_toolkit_mode: nri on every GPU host, or gpuops_cluster_nri: false"]),
    ("NRI on both sides", "cluster_prereqs", {"__nodes": "two", "gpuops_cluster_nri": True}, []),
    ("kubelet root relative", "cluster_prereqs", {"gpuops_cluster_kubelet_root": "var/lib/kubelet"},
     ["gpuops_cluster_kubelet_root: var/lib/kubelet is not an absolute path (the kubelet's --root-dir)"]),
    ("kubelet root with a space", "cluster_prereqs", {"gpuops_cluster_kubelet_root": "/var/lib/my kubelet"},
     ["gpuops_cluster_kubelet_root: /var/lib/my kubelet is not an absolute path (the kubelet's --root-dir)"]),
    # container_toolkit
    ("repository URLs", "container_toolkit", {"gpuops_container_toolkit_repo_url": "127.0.0.1:8461",
                                              "gpuops_container_toolkit_repo_key_url": "http://127.0.0.1:8461/gpgkey "},
     [f'gpuops_container_toolkit_repo_url: "127.0.0.1:8461" {URL}', f'gpuops_container_toolkit_repo_key_url: "http://127.0.0.1:8461/gpgkey " {URL}']),
    ("repository not managed", "container_toolkit", {"gpuops_container_toolkit_repo_url": "127.0.0.1:8461",
                                                     "gpuops_container_toolkit_manage_repo": False}, []),
    ("toolkit version", "container_toolkit", {"gpuops_container_toolkit_version": "v1.18"},
     ['gpuops_container_toolkit_version: "v1.18" is not a package version (1.18.2, or with its package revision, 1.18.2-1)']),
    ("toolkit version with revision", "container_toolkit", {"gpuops_container_toolkit_version": "1.18.2-1"}, []),
    ("toolkit release candidate", "container_toolkit", {"gpuops_container_toolkit_version": "1.18.0~rc.1"}, []),
    ("NRI mode without the plugin", "container_toolkit", {"gpuops_container_toolkit_mode": "nri"},
     ['gpuops_container_toolkit_nri_plugin_source: "" is not an https, http or file URL nor an absolute path on the controller: '
      "NRI mode (gpuops_container_toolkit_mode: nri) runs the toolkit's NRI plugin, which NVIDIA's packages do not ship; name "
      "its binary there (docs/nri.md)"]),
    ("NRI mode with the plugin", "container_toolkit", {"gpuops_container_toolkit_mode": "nri",
                                                       "gpuops_container_toolkit_nri_plugin_source": "/srv/nri-plugin"}, []),
    # preflight
    ("driver method", "preflight", {"gpuops_driver_method": "kmod"},
     ['gpuops_driver_method: "kmod" is not one of auto, precompiled, dkms, containerized']),
    ("own driver method", "preflight", {"gpuops_preflight_driver_method": "kmod"},
     ['gpuops_preflight_driver_method: "kmod" is not one of auto, precompiled, dkms, containerized, none']),
    ("own driver method none", "preflight", {"gpuops_preflight_driver_method": "none"}, []),
    ("driver method none", "preflight", {"gpuops_driver_method": "none"},
     ['gpuops_driver_method: "none" is not one of auto, precompiled, dkms, containerized']),
    ("both driver methods", "preflight", {"gpuops_driver_method": "dkms", "gpuops_preflight_driver_method": "kmod"},
     ['gpuops_preflight_driver_method: "kmod" is not one of auto, precompiled, dkms, containerized, none']),
    ("driver repository", "preflight", {"gpuops_driver_repository": "ppa"}, ['gpuops_driver_repository: "ppa" is not one of distro, cuda']),
    ("own driver repository", "preflight", {"gpuops_preflight_driver_repository": "ppa"},
     ['gpuops_preflight_driver_repository: "ppa" is not one of distro, cuda']),
    # dcgm_exporter
    ("DCGM images and port", "dcgm_exporter", {
        "gpuops_dcgm_exporter_image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0", "gpuops_dcgm_exporter_version": "4.6.0 ",
        "gpuops_dcgm_exporter_dcgm_image": "NVCR.io/Nvidia/dcgm", "gpuops_dcgm_exporter_dcgm_version": "-bad",
        "gpuops_dcgm_exporter_port": 94000}, [
        f'gpuops_dcgm_exporter_image: "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0" {tagged("nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0")}',
        f'gpuops_dcgm_exporter_version: "4.6.0 " {TAG}', f'gpuops_dcgm_exporter_dcgm_image: "NVCR.io/Nvidia/dcgm" {NAME}',
        f'gpuops_dcgm_exporter_dcgm_version: "-bad" {TAG}', f"gpuops_dcgm_exporter_port: 94000 {PORT}"]),
    ("DCGM metrics", "dcgm_exporter", {
        "gpuops_dcgm_exporter_metrics": "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization.\nDCGM_FI_DEV_NO_SUCH_FIELD, gauge, Nothing.\n"},
     ["gpuops_dcgm_exporter_metrics line 2: 'DCGM_FI_DEV_NO_SUCH_FIELD' is not a DCGM field name; add fields newer than this "
      "collection to gpuops_dcgm_exporter_extra_fields"]),
    ("DCGM metrics, an extra field", "dcgm_exporter", {"gpuops_dcgm_exporter_metrics": "DCGM_FI_DEV_NO_SUCH_FIELD, gauge, Nothing.\n",
                                                       "gpuops_dcgm_exporter_extra_fields": ["DCGM_FI_DEV_NO_SUCH_FIELD"]}, []),
    ("ServiceMonitor interval", "dcgm_exporter", {"gpuops_dcgm_exporter_service_monitor_interval": "15 seconds"},
     ["gpuops_dcgm_exporter_service_monitor_interval: 15 seconds is not a Prometheus duration such as 15s or 1m"]),
    ("ServiceMonitor interval a number", "dcgm_exporter", {"gpuops_dcgm_exporter_service_monitor_interval": 15},
     ["gpuops_dcgm_exporter_service_monitor_interval: 15 is not a Prometheus duration such as 15s or 1m"]),
    ("ServiceMonitor interval 1m30s", "dcgm_exporter", {"gpuops_dcgm_exporter_service_monitor_interval": "1m30s"}, []),
    ("ServiceMonitor scrape timeout", "dcgm_exporter", {"gpuops_dcgm_exporter_service_monitor_scrape_timeout": "10 s"},
     ["gpuops_dcgm_exporter_service_monitor_scrape_timeout: 10 s is not a Prometheus duration such as 10s, nor empty"]),
    ("ServiceMonitor scrape timeout 10s", "dcgm_exporter", {"gpuops_dcgm_exporter_service_monitor_scrape_timeout": "10s"}, []),
    # Before, the Jinja said "the value of \1" and "\1 is not a mapping", once: each key or item is named now.
    ("ServiceMonitor labels", "dcgm_exporter", {"gpuops_dcgm_exporter_service_monitor_labels": {"team": 1, "release": "kps", "on": True}},
     ["gpuops_dcgm_exporter_service_monitor_labels: the value of team is not a string",
      "gpuops_dcgm_exporter_service_monitor_labels: the value of on is not a string"]),
    ("ServiceMonitor relabelings", "dcgm_exporter", {"gpuops_dcgm_exporter_service_monitor_relabelings": ["x", {"action": "keep"}, 3]},
     ["gpuops_dcgm_exporter_service_monitor_relabelings: x is not a mapping", "gpuops_dcgm_exporter_service_monitor_relabelings: 3 is not a mapping"]),
    # device_plugin
    ("device plugin image", "device_plugin", {"gpuops_device_plugin_image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                                              "gpuops_device_plugin_version": "v0.20.0 "},
     [f'gpuops_device_plugin_image: "nvcr.io/nvidia/k8s-device-plugin:v0.17.0" {tagged("nvcr.io/nvidia/k8s-device-plugin:v0.17.0")}',
      f'gpuops_device_plugin_version: "v0.20.0 " {TAG}']),
    ("sharing config", "device_plugin", {"__nodes": "two", "gpuops_device_plugin_configs": {"ts-1": sharing(1)}},
     ["gpuops_device_plugin_configs['ts-1'].sharing.timeSlicing.resources[0].replicas: 1 is not accepted; the number of replicas "
      "must be an integer >= 2"]),
    ("a host's config", "device_plugin", {"__nodes": "choice"},
     ["gpuops_device_plugin_config on l40s: 'no-such-config' names no config of gpuops_device_plugin_configs (known: none)"]),
    ("default config", "device_plugin", {"__nodes": "two", "gpuops_device_plugin_default_config": "nope"},
     ["gpuops_device_plugin_default_config: 'nope' is not a config of gpuops_device_plugin_configs (known: none)"]),
    ("sharing configs with DRA", "device_plugin", {"__nodes": "two", "gpuops_gpu_scheduling": "dra",
                                                   "gpuops_device_plugin_configs": {"ts-2": sharing(2), "ts-1b": sharing(2)}},
     ["gpuops_device_plugin_configs: ['ts-2', 'ts-1b'] are the device plugin's sharing configs, which nothing reads with "
      "gpuops_gpu_scheduling: dra; accepted: {} (no configs) with DRA"]),
    ("device plugin's driver root from the hosts", "device_plugin", {"__nodes": "driver_roots"},
     ["gpuops_device_plugin_driver_root: the GPU nodes' hosts put their driver at different roots "
      "(gpuops_container_toolkit_driver_root: / on l40s; /opt/nvidia/driver on a100), and the device plugin has one; accepted: "
      "the same gpuops_container_toolkit_driver_root on every GPU host, or gpuops_device_plugin_driver_root set"]),
    ("device plugin's driver root set", "device_plugin", {"__nodes": "driver_roots", "gpuops_device_plugin_driver_root": "/opt/nvidia/driver"},
     []),
    # A node the driver container serves has its root found on the node: only the host drivers' roots count.
    ("device plugin beside the driver container", "device_plugin", {"__nodes": "mixed_driver"}, []),
    ("device plugin's driver root not a path", "device_plugin", {"__nodes": "two", "gpuops_device_plugin_driver_root": "opt/nvidia"},
     ["gpuops_device_plugin_driver_root: opt/nvidia is not an absolute path (the host driver's root, such as / or /opt/nvidia/driver); "
      "empty: the GPU hosts' gpuops_container_toolkit_driver_root"]),
    # dra
    ("without DRA", "dra", {"gpuops_dra_image": "x:y", "gpuops_dra_healthcheck_port": 0}, []),
    ("DRA image and ports", "dra", {
        "gpuops_gpu_scheduling": "dra", "gpuops_dra_image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v1", "gpuops_dra_version": "",
        "gpuops_dra_healthcheck_port": 0, "gpuops_dra_compute_domains_healthcheck_port": 70000}, [
        f'gpuops_dra_image: "nvcr.io/nvidia/k8s-dra-driver-gpu:v1" {tagged("nvcr.io/nvidia/k8s-dra-driver-gpu:v1")}',
        f'gpuops_dra_version: "" {TAG}', f"gpuops_dra_healthcheck_port: 0 {PORT}", f"gpuops_dra_compute_domains_healthcheck_port: 70000 {PORT}"]),
    ("DRA ports the same", "dra", {"gpuops_gpu_scheduling": "dra", "gpuops_dra_healthcheck_port": "51515"},
     ["gpuops_dra_compute_domains_healthcheck_port: 51515 is gpuops_dra_healthcheck_port too; the two containers of a plugin pod "
      "share its ports; accepted: another port"]),
    ("DRA feature gates", "dra", {"gpuops_gpu_scheduling": "dra", "gpuops_dra_feature_gates": {"NoSuchGate": True, "DynamicMIG": "yes"}},
     ["gpuops_dra_feature_gates: 'NoSuchGate' is not a feature gate of the DRA driver; accepted: TimeSlicingSettings, MPSSupport, "
      "PassthroughSupport, DynamicMIG, NVMLDeviceHealthCheck, IMEXDaemonsWithDNSNames, ComputeDomainCliques, CrashOnNVLinkFabricErrors, "
      "DeviceMetadata, FabricManagerPartitioning, HostManagedIMEXDaemon, DRAListTypeAttributes, ConsumableShares",
      "gpuops_dra_feature_gates['DynamicMIG']: 'yes' is not true or false"]),
    ("DRA driver root", "dra", {"gpuops_gpu_scheduling": "dra", "__nodes": "mixed_driver"},
     ["gpuops_dra_driver_root: the driver container serves a100 and the host's own driver l40s, and the DRA driver's plugin has one "
      "root; accepted: the same driver method on every GPU node, or gpuops_dra_driver_root set"]),
    ("DRA driver root set", "dra", {"gpuops_gpu_scheduling": "dra", "__nodes": "mixed_driver", "gpuops_dra_driver_root": "/"}, []),
    ("DRA driver root from the hosts", "dra", {"gpuops_gpu_scheduling": "dra", "__nodes": "driver_roots"},
     ["gpuops_dra_driver_root: the GPU nodes' hosts put their driver at different roots "
      "(gpuops_container_toolkit_driver_root: / on l40s; /opt/nvidia/driver on a100), and the DRA driver's plugin has one; "
      "accepted: the same gpuops_container_toolkit_driver_root on every GPU host, or gpuops_dra_driver_root set"]),
    # driver_container
    ("driver container images", "driver_container", {
        "gpuops_driver_container_image": "nvcr.io/nvidia/driver:595", "gpuops_driver_container_manager_image": "a b",
        "gpuops_driver_container_manager_version": "v 1", "gpuops_driver_container_gds_image": "",
        "gpuops_driver_container_gds_version": ".2", "gpuops_driver_container_gdrcopy_image": "nvcr.io/X",
        "gpuops_driver_container_gdrcopy_version": "v2.6:1"}, [
        f'gpuops_driver_container_image: "nvcr.io/nvidia/driver:595" {tagged("nvcr.io/nvidia/driver:595")}',
        f'gpuops_driver_container_manager_image: "a b" {NAME}', f'gpuops_driver_container_manager_version: "v 1" {TAG}',
        'gpuops_driver_container_gds_image: "" is not an image name (registry/path, e.g. nvcr.io/nvidia/k8s-device-plugin)',
        f'gpuops_driver_container_gds_version: ".2" {TAG}', f'gpuops_driver_container_gdrcopy_image: "nvcr.io/X" {NAME}',
        f'gpuops_driver_container_gdrcopy_version: "v2.6:1" {TAG}']),
    ("driver container settings", "driver_container", {
        "gpuops_driver_container_version": "595", "gpuops_driver_container_drain_timeout": "300",
        "gpuops_driver_container_fabric_manager_config": {"fabric_mode": 1}}, [
        "gpuops_driver_container_version: '595' is not a driver version such as 580.95.05 (the image tag is <version>-<os tag>)",
        "gpuops_driver_container_drain_timeout: '300' is not a Go duration such as 0s, 300s or 5m",
        "gpuops_driver_container_fabric_manager_config: key 'fabric_mode' is not a fabricmanager.cfg key (upper case, digits, _; "
        "e.g. FABRIC_MODE)"]),
    # gpu_feature_discovery
    ("GFD image", "gpu_feature_discovery", {"gpuops_gpu_feature_discovery_image": "k8s-device-plugin:v1",
                                            "gpuops_gpu_feature_discovery_version": "v 1"},
     [f'gpuops_gpu_feature_discovery_image: "k8s-device-plugin:v1" {tagged("k8s-device-plugin:v1")}',
      f'gpuops_gpu_feature_discovery_version: "v 1" {TAG}']),
    ("GFD sleep interval", "gpu_feature_discovery", {"gpuops_gpu_feature_discovery_sleep_interval": "45 seconds"},
     ["gpuops_gpu_feature_discovery_sleep_interval: 45 seconds is not a Go duration such as 60s or 5m, nor infinite"]),
    ("GFD sleep interval 1.5h", "gpu_feature_discovery", {"gpuops_gpu_feature_discovery_sleep_interval": "1.5h"}, []),
    ("GFD sleep interval infinite", "gpu_feature_discovery", {"gpuops_gpu_feature_discovery_sleep_interval": "infinite"}, []),
    # mig_manager
    ("MIG manager image", "mig_manager", {
        "__nodes": "two", "gpuops_mig_manager_image": "nvcr.io/nvidia/cloud-native/k8s-mig-manager@sha256:" + "a" * 64,
        "gpuops_mig_manager_version": "latest!"}, [
        f'gpuops_mig_manager_image: "nvcr.io/nvidia/cloud-native/k8s-mig-manager@sha256:{"a" * 64}" '
        + tagged("nvcr.io/nvidia/cloud-native/k8s-mig-manager@sha256:" + "a" * 64),
        f'gpuops_mig_manager_version: "latest!" {TAG}']),
    ("MIG default config", "mig_manager", {"__nodes": "two", "gpuops_mig_manager_default_config": "all-balancd"},
     [f"gpuops_mig_manager_default_config: 'all-balancd' is not a MIG config {KNOWN_MIG}"]),
    ("a host's MIG config", "mig_manager", {"__nodes": "mig_choice"},
     [f"gpuops_mig_manager_config on a100: 'no-such-layout' is not a MIG config {KNOWN_MIG}"]),
    ("custom MIG config", "mig_manager", {"__nodes": "two", "gpuops_mig_manager_configs": {
        "custom": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.12gb": 7}}]}},
     ["gpuops_mig_manager_configs['custom'][0].mig-devices: 1g.12gb is not a MIG profile NVIDIA A100 80GB PCIe (0x20B510DE) can "
      "host; it offers 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"]),
    ("single strategy on a half-MIG node", "mig_manager", {
        "__nodes": "two", "gpuops_mig_manager_default_config": "half", "gpuops_device_plugin_mig_strategy": "single",
        "gpuops_mig_manager_configs": {"half": [
            {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
            {"devices": [1], "mig-enabled": False}]}},
     ["gpuops_device_plugin_mig_strategy: single advertises no GPU on a100, whose MIG config half leaves 1 of its 2 GPUs in MIG "
      "mode; use mixed, or a config with one profile on every GPU (gpuops_mig_manager_config, all-<profile>)"]),
    # node_feature_discovery
    ("NFD image", "node_feature_discovery", {"gpuops_node_feature_discovery_image": "registry.k8s.io/nfd/node-feature-discovery:v0.19.0",
                                             "gpuops_node_feature_discovery_version": "v0.19.0 "}, [
        'gpuops_node_feature_discovery_image: "registry.k8s.io/nfd/node-feature-discovery:v0.19.0" '
        + tagged("registry.k8s.io/nfd/node-feature-discovery:v0.19.0"),
        f'gpuops_node_feature_discovery_version: "v0.19.0 " {TAG}',
        "gpuops_node_feature_discovery_version: v0.19.0  is not a release such as v0.19.0",
        # The URL's default is made of the version.
        "gpuops_node_feature_discovery_crds_url: https://raw.githubusercontent.com/kubernetes-sigs/node-feature-discovery/v0.19.0 "
        "/deployment/base/nfd-crds/nfd-api-crds.yaml is not an https, http or file URL"]),
    ("NFD deploy", "node_feature_discovery", {"gpuops_node_feature_discovery_deploy": "maybe"},
     ["gpuops_node_feature_discovery_deploy: maybe is not auto, true or false"]),
    ("NFD deploy a boolean", "node_feature_discovery", {"gpuops_node_feature_discovery_deploy": True}, []),
    ("NFD deploy in capitals", "node_feature_discovery", {"gpuops_node_feature_discovery_deploy": "Auto"}, []),
    ("NFD version", "node_feature_discovery", {"gpuops_node_feature_discovery_version": "0.19.0"},
     ["gpuops_node_feature_discovery_version: 0.19.0 is not a release such as v0.19.0"]),
    ("NFD checksum", "node_feature_discovery", {"gpuops_node_feature_discovery_crds_checksum": "sha256:F8A4"},
     ["gpuops_node_feature_discovery_crds_checksum: sha256:F8A4 is not sha256: and 64 hex digits"]),
    ("NFD CRDs URL", "node_feature_discovery", {"gpuops_node_feature_discovery_crds_url": "ftp://example.com/crds.yaml"},
     ["gpuops_node_feature_discovery_crds_url: ftp://example.com/crds.yaml is not an https, http or file URL"]),
    ("NFD CRDs file", "node_feature_discovery", {"gpuops_node_feature_discovery_crds_url": "file:///tmp/crds.yaml"}, []),
    # validation (before, these two messages carried the line breaks and indent of the YAML they were written in)
    ("smoke test image", "validation", {"gpuops_validation_image": "nvcr.io/nvidia/cuda"},
     ['gpuops_validation_image: "nvcr.io/nvidia/cuda" has no tag or digest; name the one to run (…:tag or …@sha256:<hex>)']),
    ("smoke test when", "validation", {"gpuops_validation_smoke": "sometimes"},
     ['gpuops_validation_smoke: "sometimes" is not one of changed (default: on the nodes something changed on in this run), always, never']),
    ("the smoke test's old variable", "validation", {"gpuops_validation_smoke_test": False},
     ["gpuops_validation_smoke_test was replaced by gpuops_validation_smoke: set it to always, never or changed (the default)"]),
]

KEYS = {"gpuops_container_toolkit_runtime_handler": "", "gpuops_container_toolkit_driver_root": "",
        "gpuops_container_toolkit_mode": "", "gpuops_container_toolkit_cdi": None, "gpuops_node_container_toolkit": True,
        "gpuops_device_plugin_config": "", "gpuops_mig_manager_config": "", "gpuops_node_changed": False}
NODE_SETS: dict[str, dict[str, tuple[str, dict]]] = {
    "two": {"a100": ("a100-pcie-mig", {}), "l40s": ("l40s", {})},
    "handlers": {"a100": ("a100-pcie-mig", {"gpuops_container_toolkit_runtime_handler": "nvidia"}),
                 "l40s": ("l40s", {"gpuops_container_toolkit_runtime_handler": "nvidia-cdi"})},
    "choice": {"a100": ("a100-pcie-mig", {}), "l40s": ("l40s", {"gpuops_device_plugin_config": "no-such-config"})},
    "mixed_driver": {"a100": ("a100-pcie-mig", {"gpuops_driver_method": "containerized"}), "l40s": ("l40s", {})},
    "driver_roots": {"a100": ("a100-pcie-mig", {"gpuops_container_toolkit_driver_root": "/opt/nvidia/driver"}), "l40s": ("l40s", {})},
    "nri_modes": {"a100": ("a100-pcie-mig", {"gpuops_container_toolkit_mode": "nri"}),
                  "l40s": ("l40s", {"gpuops_container_toolkit_mode": "cdi"}), "t4": ("t4", {})},
    "mig_choice": {"a100": ("a100-pcie-mig", {"gpuops_mig_manager_config": "no-such-layout"}), "l40s": ("l40s", {})},
}


def _trusted(value: Any) -> Any:
    """As Ansible loads a role's files: their strings may be templates."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _scope(role: str) -> list[str]:
    """The role and its dependencies, whose defaults and vars it sees."""
    meta = yaml.safe_load((ROLES / role / "meta/main.yml").read_text()) or {}
    deps = [str(d["role"] if isinstance(d, dict) else d).removeprefix("gpuops.nvidia.") for d in meta.get("dependencies") or []]
    return [*(r for d in deps for r in _scope(d)), role]


def role_variables(role: str) -> dict[str, Any]:
    variables: dict[str, Any] = {}
    for name in _scope(role):
        for part in ("defaults", "vars"):
            path = ROLES / name / part / "main.yml"
            if path.exists():
                variables.update(_trusted(yaml.safe_load(path.read_text()) or {}))
    return variables


@pytest.fixture(scope="module")
def node_sets(info_of):
    out = {}
    for name, hosts in NODE_SETS.items():
        hostvars = {h: {"gpuops_gpu_info": info_of(profile), **extra} for h, (profile, extra) in hosts.items()}
        out[name] = cluster_nodes(list(hostvars), hostvars, KEYS)
    return out


@pytest.fixture
def check(node_sets, tmp_path, monkeypatch):
    """The role's own messages with these variables set (its declaration, or the one given)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(KUBECONFIG))
    for name in ("K8S_AUTH_KUBECONFIG", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)

    def run(role: str, given: dict[str, Any], declaration: dict | None = None) -> list[str]:
        given = copy.deepcopy(given)
        for name, setting in list(given.items()):
            if setting == "kubeconfig":
                given[name] = str(kubeconfig)
        if "$KUBECONFIG" in given:
            monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        variables = {**role_variables(role), "groups": {"all": ["n1"], "gpu_nodes": ["n1"]},
                     "__gpuops_cluster_common_nodes": node_sets[given.pop("__nodes", "two")]}
        variables.update({k: v for k, v in given.items() if not k.startswith("$")})
        templar = Templar(loader=DataLoader(), variables=variables)

        def value(name: str) -> Any:
            if name not in variables:
                raise inputs.Undefined(name)
            return templar.template(variables[name])

        if declaration is None:
            declaration = yaml.safe_load(declaration_path(role).read_text())
        messages = [m.replace(str(kubeconfig), "kubeconfig") for m in inputs.declared_errors(declaration, value, rule)]
        return messages

    return run


def test_every_role_with_own_checks_has_cases():
    assert sorted({role for _c, role, _v, _m in CASES}) == DECLARED
    assert {"cluster_common", "preflight", "container_toolkit", "dcgm_exporter", "validation"} <= set(DECLARED)


@pytest.mark.parametrize("role", DECLARED)
def test_the_defaults_pass(check, role):
    assert check(role, {}) == []


@pytest.mark.parametrize(("case", "role", "given", "messages"), CASES, ids=[c[0] for c in CASES])
def test_each_mistake_is_named_word_for_word(check, case, role, given, messages):
    assert check(role, given) == messages


def _without_each_check(declaration: dict) -> list[tuple[str, dict]]:
    """The declaration less one check at a time: each kind of each variable, each rule."""
    out = []
    for variable, spec in (declaration.get("kinds") or {}).items():
        kinds = [spec] if isinstance(spec, str) else spec if isinstance(spec, list) else [spec["kind"]]
        for kind in kinds:
            less = copy.deepcopy(declaration)
            rest = [k for k in kinds if k != kind]
            if rest:
                less["kinds"][variable] = rest
            else:
                del less["kinds"][variable]
            out.append((f"{variable}: {kind}", less))
    for index, entry in enumerate(declaration.get("rules") or []):
        less = copy.deepcopy(declaration)
        del less["rules"][index]
        out.append((entry["rule"], less))
    if declaration.get("when"):
        less = copy.deepcopy(declaration)
        del less["when"]
        out.append(("when", less))
    return out


@pytest.mark.parametrize("role", DECLARED)
def test_no_check_can_go_unnoticed(check, role):
    """Each check the role declares (and its condition) is one some case above needs: without it, a case's messages change."""
    declaration = yaml.safe_load(declaration_path(role).read_text())
    cases = [(given, messages) for _c, r, given, messages in CASES if r == role]
    unnoticed = [what for what, less in _without_each_check(declaration)
                 if all(check(role, given, less) == messages for given, messages in cases)]
    assert not unnoticed, f"{role}: no case fails without {unnoticed}"


def _spec_options() -> set[str]:
    options: set[str] = set()
    for path in ROLES.glob("*/meta/argument_specs.yml"):
        for entry in (yaml.safe_load(path.read_text())["argument_specs"] or {}).values():
            options |= set((entry or {}).get("options") or {})
    return options


# The variables a declaration may read that are no role's option: cluster_common's read of the GPU nodes, a role's own
# private settings (vars/main.yml), Ansible's inventory, the connection's settings (docs/cluster.md: without a default,
# the kube modules find one), and a variable that is gone (named where a user still sets it).
NOT_OPTIONS = {"__gpuops_cluster_common_nodes", "__gpuops_driver_container_settings", "groups", "gpuops_cluster_kubeconfig",
               "gpuops_cluster_context", "gpuops_validation_smoke_test"}


@pytest.mark.parametrize("role", DECLARED)
def test_a_declaration_names_known_kinds_rules_and_variables(role):
    declaration = yaml.safe_load(declaration_path(role).read_text())
    assert inputs.declaration_problems(declaration, rule) == []
    named = set(declaration.get("kinds") or {}) | {v for e in declaration.get("rules") or [] for v in (e.get("args") or {}).values()}
    named |= set(declaration.get("when") or {}) | {v for s in (declaration.get("kinds") or {}).values() if isinstance(s, dict)
                                                   for v in s.get("when") or {}}
    assert named - _spec_options() <= NOT_OPTIONS, f"{role}: {sorted(named - _spec_options() - NOT_OPTIONS)} are no role's options"


def test_a_wrong_declaration_is_named():
    problems = inputs.declaration_problems(
        {"kinds": {"v": "imgae_tag", "w": []}, "rules": [{"rule": "cluster.no_such"}, {"rule": "cluster.dra_ports", "args": {"port": "x"}}],
         "whenn": {}}, rule)
    assert problems == [
        "unknown key 'whenn' (known: kinds, rules, when)", "kinds: v: unknown kind 'imgae_tag'", "kinds: w: no kind",
        "rules: 'cluster.no_such': no rule 'no_such' in module_utils/cluster/inputs.py (known: dcgm_metrics, device_plugin_configs, "
        "device_plugin_driver_root, device_plugin_with_dra, dra_driver_root, dra_feature_gates, dra_ports, driver_container, gpu_hosts, kube_context, "
        "kubelet_root, mig_configs, nri, nri_hosts, validation_smoke)",
        "rules: cluster.dra_ports: takes no argument 'port'", "rules: cluster.dra_ports: argument 'healthcheck_port' not given",
        "rules: cluster.dra_ports: argument 'compute_domains_port' not given"]


def test_a_rule_that_breaks_is_raised_unless_the_spec_refused_the_value():
    declaration = {"rules": [{"rule": "cluster.dcgm_metrics", "args": {"metrics": "m", "extra_fields": "x"}}]}
    value = _values({"m": "DCGM_FI_DEV_GPU_UTIL, gauge, x.\n", "x": 3})  # not a list: list(3) breaks
    with pytest.raises(inputs.RuleFailed, match=r"cluster\.dcgm_metrics: TypeError"):
        inputs.declared_errors(declaration, value, rule)
    assert inputs.declared_errors(declaration, value, rule, tolerate=True) == []


def test_an_undefined_variable_a_rule_needs_is_named():
    declaration = {"rules": [{"rule": "cluster.dra_driver_root", "args": {"nodes": "__gpuops_cluster_common_nodes", "root": "r"}}]}

    def value(name: str) -> Any:
        raise inputs.Undefined(name)

    with pytest.raises(inputs.Undefined, match="__gpuops_cluster_common_nodes"):
        inputs.declared_errors(declaration, value, rule)


def _values(given: dict[str, Any]):
    def value(name: str) -> Any:
        if name not in given:
            raise inputs.Undefined(name)
        return given[name]

    return value


def test_conditions_compare_booleans_as_ansible_does():
    declaration = {"kinds": {"u": {"kind": "url", "when": {"manage": True}}}}
    for manage, expected in (("yes", 1), ("True", 1), (True, 1), ("false", 0), (0, 0)):
        assert len(inputs.declared_errors(declaration, _values({"u": "not a url", "manage": manage}), rule)) == expected, manage
    assert inputs.declared_errors(declaration, _values({"u": "not a url"}), rule) == [], "an undefined condition does not hold"
    assert inputs.declared_errors({"when": {"s": "dra"}, "kinds": {"u": "url"}}, _values({"u": "x", "s": "device-plugin"}), rule) == []
    assert inputs.declared_errors({"kinds": {"u": "url"}}, _values({}), rule) == [], "an undefined variable has no kind to check"

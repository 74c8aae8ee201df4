"""The lab's simulated device plugin: GPU capacity appears on a node when a device plugin pod runs there.

A real node gets `nvidia.com/gpu` (or `nvidia.com/mig-<profile>`) capacity only after the NVIDIA device
plugin registers with its kubelet. KWOK has no kubelet plugins, so this small controller stands in for
that step: it watches pods labelled `app=nvidia-device-plugin-daemonset` (the GPU Operator's label, which
the collection's device plugin role keeps), and when one is Running on a node it patches the node's
status with the resources the plugin would advertise for the node's hardware profile (the
`gpuops-lab/profile` annotation the lab puts on every node) and the pod's `MIG_STRATEGY`:

- none: one `nvidia.com/gpu` per GPU;
- single: one `nvidia.com/gpu` per MIG device, when every GPU is in MIG mode with devices of one profile
  (the plugin refuses any other layout, and advertises nothing);
- mixed: `nvidia.com/gpu` for GPUs not in MIG mode, `nvidia.com/mig-<profile>` per MIG device.

Sharing, as the device plugin's config manager and plugin apply it: when the pod runs with a config
(CONFIG_FILE, the ConfigMap mounted as `available-configs`), the config is the one the node's
`nvidia.com/device-plugin.config` label names, else the config manager's DEFAULT_CONFIG, else none; its
`sharing.mps` (when present) or `sharing.timeSlicing` resources multiply their resource by `replicas`, under
`<name>.shared` with `renameByDefault`. Label and ConfigMap changes are watched, as the config manager does.

MPS, as the device plugin runs it: with a config whose sharing is `mps`, the plugin waits for the MPS control
daemon (the `nvidia-device-plugin-mps-control-daemon` DaemonSet's pod on the node) and, while none runs
there, fails its health check and advertises nothing. So the MPS daemon's pods are watched too.

GPU Feature Discovery (gfd.py): when a GFD pod (`app=gpu-feature-discovery`) runs on a node, the labels
GFD would set there, for the node's profile, the pod's MIG_STRATEGY and the config its config manager picks
(as above), are written as GFD writes them, in a NodeFeature object, which the lab's real nfd-master turns
into Node labels. They follow label and ConfigMap changes as the device plugin's resources do.

The MIG manager (migmgr.py): while a MIG manager pod runs on a node, the config its
`nvidia.com/mig.config` label names is applied (state pending, then success or failed), and the device plugin
and GFD stand-ins advertise and label the node's GPUs in the layout it gives.

The DRA driver's kubelet plugin (dra.py): while its pod runs on a node, the node's ResourceSlice is published
from its profile, in the MIG layout above, and removed with the last pod; the real scheduler allocates claims from it.

When the last device plugin pod on a node goes, the node's NVIDIA resources drop to 0, as a kubelet does
when a plugin unregisters. The roles are tested for what they change; nothing is preset.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass

import yaml

from . import dra, gfd, migmgr
from .hardware import load_profile

PLUGIN_APP = "nvidia-device-plugin-daemonset"
MPS_APP = "nvidia-device-plugin-mps-control-daemon"
GFD_APP = "gpu-feature-discovery"
MIG_APP = "nvidia-mig-manager"
DRA_APP = dra.PLUGIN_APP
SELECTOR = f"app in ({PLUGIN_APP},{MPS_APP},{GFD_APP},{MIG_APP},{DRA_APP})"
PROFILE_ANNOTATION = "gpuops-lab/profile"
CONFIG_LABEL = "nvidia.com/device-plugin.config"


@dataclass(frozen=True)
class PluginPod:
    """What a running plugin pod was started with."""

    mig_strategy: str = "none"
    namespace: str = ""
    configmap: str | None = None  # the ConfigMap of named configs, when the pod runs with one
    default_config: str = ""
    # (apiVersion, kind, name, uid) of the DaemonSet that runs the pod, then of the pod: GFD's NodeFeature owners.
    owners: tuple = ()


def uses_mps(config: dict | None) -> bool:
    return ((config or {}).get("sharing") or {}).get("mps") is not None


def shared(advert: dict[str, int], config: dict | None) -> dict[str, int]:
    """The resources after sharing: replicated resources multiplied, renamed to <name>.shared when asked."""
    sharing = (config or {}).get("sharing") or {}
    block = sharing.get("mps") if sharing.get("mps") is not None else sharing.get("timeSlicing")
    if not block:
        return dict(advert)
    replicas = {}
    for res in block.get("resources") or []:
        name = res["name"] if res["name"].startswith("nvidia.com/") else "nvidia.com/" + res["name"]
        replicas[name] = int(res["replicas"])
    out: dict[str, int] = {}
    for name, count in advert.items():
        if name in replicas:
            key = name + ".shared" if block.get("renameByDefault") else name
            out[key] = out.get(key, 0) + count * replicas[name]
        else:
            out[name] = out.get(name, 0) + count
    return out


def advertised(profile: dict, mig_strategy: str) -> dict[str, int]:
    """The extended resources the device plugin advertises for this hardware and MIG strategy."""
    gpus = profile.get("gpus")
    if not gpus:
        return {}
    count = len(gpus["bus_ids"])
    enabled = [bool(e) for e in (gpus.get("mig_enabled") or [])] + [False] * count
    devices = [list(d) for d in (gpus.get("mig_devices") or [])] + [[]] * count
    mig = [devices[i] for i in range(count) if enabled[i]]
    full = sum(1 for i in range(count) if not enabled[i])
    if mig_strategy == "none" or not mig:
        return {"nvidia.com/gpu": count}
    if mig_strategy == "single":
        names = {name for devs in mig for name in devs}
        if full or len(names) != 1 or any(not devs for devs in mig):
            return {}
        return {"nvidia.com/gpu": sum(len(devs) for devs in mig)}
    resources = {"nvidia.com/gpu": full} if full else {}
    for devs in mig:
        for name in devs:
            key = "nvidia.com/mig-" + str(name).replace("+", ".")
            resources[key] = resources.get(key, 0) + 1
    return resources


def _env(pod, name: str) -> str | None:
    for container in list(pod.spec.containers or []) + list(getattr(pod.spec, "init_containers", None) or []):
        for env in container.env or []:
            if env.name == name and env.value is not None:
                return env.value
    return None


def plugin_pod(pod) -> PluginPod:
    configmap = None
    if _env(pod, "CONFIG_FILE"):
        for volume in getattr(pod.spec, "volumes", None) or []:
            if volume.name == "available-configs" and getattr(volume, "config_map", None):
                configmap = volume.config_map.name
    owners = tuple((o.api_version, o.kind, o.name, o.uid) for o in getattr(pod.metadata, "owner_references", None) or []
                   if o.kind == "DaemonSet")[:1]
    if owners:
        owners += (("v1", "Pod", pod.metadata.name, pod.metadata.uid),)
    return PluginPod(_env(pod, "MIG_STRATEGY") or "none", pod.metadata.namespace or "", configmap,
                     _env(pod, "DEFAULT_CONFIG") or "", owners)


class Simulator:
    def __init__(self, api, custom=None) -> None:
        self.api = api
        self.custom = custom  # CustomObjectsApi, for GFD's NodeFeature objects
        self.gfd: dict[str, dict[str, PluginPod]] = {}  # node -> {pod uid: how it runs} of running GFD pods
        self.features: dict[str, tuple] = {}  # node -> (the labels, the owners) last written for it
        self.migmgr: dict[str, dict[str, tuple[str, str]]] = {}  # node -> {pod uid: (namespace, mig-parted ConfigMap)}
        self.mig_label: dict[str, str | None] = {}  # node -> its nvidia.com/mig.config
        self.mig_applied: dict[str, str] = {}  # node -> the config its GPUs are in
        self.layouts: dict[str, dict] = {}  # node -> its profile with the GPUs in that layout
        self.mig_fail: dict[str, bool] = {}  # node -> annotated to make its MIG changes fail
        self.pods: dict[str, dict[str, PluginPod]] = {}  # node -> {pod uid: how it runs} of running plugin pods
        self.mps: dict[str, set[str]] = {}  # node -> uids of its running MPS control daemon pods
        self.dra: dict[str, set[str]] = {}  # node -> uids of its running DRA kubelet plugin pods
        self.slices: dict[str, dict | None] = {}  # node -> the ResourceSlice spec last published for it (None: none)
        self.applied: dict[str, dict[str, int]] = {}
        self.profiles: dict[str, dict | None] = {}
        self.labels: dict[str, str | None] = {}  # node -> its nvidia.com/device-plugin.config
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}
        # Nodes without the lab's profile annotation: real nodes, which the stand-ins leave alone (only KWOK nodes
        # carry it).
        self.real: dict[str, bool] = {}
        self.lock = threading.RLock()

    def _profile(self, node: str) -> dict | None:
        """The node's hardware, its GPUs in the MIG layout the MIG manager stand-in last applied."""
        if node not in self.profiles:
            meta = self.api.read_node(node).metadata
            name = (meta.annotations or {}).get(PROFILE_ANNOTATION)
            self.profiles[node] = load_profile(name) if name else None
            self.real[node] = name is None
            self.labels[node] = (meta.labels or {}).get(CONFIG_LABEL)
            self.mig_label.setdefault(node, (meta.labels or {}).get(migmgr.MIG_CONFIG))
            self.mig_fail.setdefault(node, (meta.annotations or {}).get(migmgr.FAIL_ANNOTATION) == "true")
        return self.layouts.get(node, self.profiles[node])

    def _config(self, node: str, pod: PluginPod) -> dict | None:
        if not pod.configmap:
            return None
        name = self.labels.get(node) or pod.default_config
        if not name:
            return None
        key = (pod.namespace, pod.configmap)
        if key not in self.configmaps:
            try:
                self.configmaps[key] = dict(self.api.read_namespaced_config_map(pod.configmap, pod.namespace).data or {})
            except Exception:  # not there (yet): the plugin would wait for it; advertise without sharing
                return None
        text = self.configmaps[key].get(name)
        return yaml.safe_load(text) if text else None

    def node_changed(self, node_obj) -> None:
        """A node watch event: re-sync when its config label changed."""
        name = node_obj.metadata.name
        value = (node_obj.metadata.labels or {}).get(CONFIG_LABEL)
        mig = (node_obj.metadata.labels or {}).get(migmgr.MIG_CONFIG)
        fail = (getattr(node_obj.metadata, "annotations", None) or {}).get(migmgr.FAIL_ANNOTATION) == "true"
        with self.lock:
            self.mig_fail[name] = fail
            if name in self.labels and self.labels[name] == value and self.mig_label.get(name) == mig:
                return
            self.labels[name] = value
            if name in self.mig_label and self.mig_label[name] != mig:
                # The MIG manager acts on every change of the label's value: taken off and set again, a config
                # it failed (or applied) is applied again.
                self.mig_applied.pop(name, None)
            self.mig_label[name] = mig
            if self.pods.get(name) or self.gfd.get(name) or self.migmgr.get(name) or self.dra.get(name):
                self.sync(name)

    def configmap_changed(self, cm, deleted: bool = False) -> None:
        key = (cm.metadata.namespace, cm.metadata.name)
        with self.lock:
            if deleted:
                self.configmaps.pop(key, None)
            else:
                self.configmaps[key] = dict(cm.data or {})
            for node in sorted(set(self.pods) | set(self.gfd) | set(self.migmgr)):
                pods = list(self.pods.get(node, {}).values()) + list(self.gfd.get(node, {}).values())
                if any((p.namespace, p.configmap) == key for p in pods) or key in self.migmgr.get(node, {}).values():
                    self.sync(node)

    def resync(self, pods) -> None:
        """After a (re)list: the listed pods are all there is; nodes whose pods went meanwhile drop theirs."""
        before = set(self.pods) | set(self.mps) | set(self.gfd) | set(self.migmgr) | set(self.dra)
        self.pods, self.mps, self.gfd, self.migmgr, self.dra = {}, {}, {}, {}, {}
        for pod in pods:
            self.observe(pod, sync=False)
        for node in sorted(before | set(self.pods) | set(self.mps) | set(self.gfd) | set(self.migmgr) | set(self.dra)):
            self.sync(node)

    def observe(self, pod, deleted: bool = False, sync: bool = True) -> None:
        node = pod.spec.node_name
        if not node:
            return
        running = not deleted and pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
        app = (getattr(pod.metadata, "labels", None) or {}).get("app")
        if app == MIG_APP:
            managers = self.migmgr.setdefault(node, {})
            if running:
                cm = next((v.config_map.name for v in getattr(pod.spec, "volumes", None) or []
                           if v.name == "mig-parted-config" and getattr(v, "config_map", None)), "default-mig-parted-config")
                managers[pod.metadata.uid] = (pod.metadata.namespace or "", cm)
            else:
                managers.pop(pod.metadata.uid, None)
        elif app == GFD_APP:
            gfd_pods = self.gfd.setdefault(node, {})
            if running:
                gfd_pods[pod.metadata.uid] = plugin_pod(pod)
            else:
                gfd_pods.pop(pod.metadata.uid, None)
        elif app in (DRA_APP, MPS_APP):
            # Pods whose presence alone counts: the DRA plugin's, the MPS control daemon's.
            uids = (self.dra if app == DRA_APP else self.mps).setdefault(node, set())
            if running:
                uids.add(pod.metadata.uid)
            else:
                uids.discard(pod.metadata.uid)
        else:
            on_node = self.pods.setdefault(node, {})
            if running:
                on_node[pod.metadata.uid] = plugin_pod(pod)
            else:
                on_node.pop(pod.metadata.uid, None)
        if sync:
            self.sync(node)

    def sync(self, node: str) -> None:
        self._profile(node)
        if self.real.get(node):
            return  # a real node (a kubelet joined to the lab cluster): its own device plugin, GFD and MIG manager act
        self.sync_mig(node)
        self.sync_plugin(node)
        self.sync_gfd(node)
        self.sync_dra(node)

    def sync_dra(self, node: str) -> None:
        """The node's ResourceSlice while a DRA kubelet plugin pod runs there, in the node's current MIG layout."""
        if self.custom is None or (not self.dra.get(node) and self.slices.get(node) is None):
            return
        args = ("resource.k8s.io", "v1", "resourceslices")
        body = None
        if self.dra.get(node):
            uid = self.api.read_node(node).metadata.uid
            body = dra.resource_slice(node, self._profile(node), (node, uid))
        spec = body["spec"] if body else None
        if self.slices.get(node, "unknown") == spec:
            return
        name = dra.slice_name(node)
        try:
            current = self.custom.get_cluster_custom_object(*args, name)
        except Exception as exc:  # not there (404)
            if getattr(exc, "status", None) != 404:
                raise
            current = None
        if body is None:
            if current is not None:
                self.custom.delete_cluster_custom_object(*args, name)
        elif current is None:
            self.custom.create_cluster_custom_object(*args, body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.custom.replace_cluster_custom_object(*args, name, body)
        self.slices[node] = spec
        count = len(spec["devices"]) if spec else 0
        print(f"{time.strftime('%H:%M:%S')} {node}: ResourceSlice with {count} device(s)", flush=True)

    def sync_mig(self, node: str) -> None:
        """Apply the node's MIG config label, while a MIG manager pod runs there and it is not applied yet."""
        managers = sorted(set(self.migmgr.get(node, {}).values()))
        self._profile(node)
        wanted = self.mig_label.get(node)
        if not managers or not wanted or self.mig_applied.get(node) == wanted:
            return
        self._set_state(node, "pending")
        namespace, cm = managers[0]
        try:
            if self.mig_fail.get(node):
                raise migmgr.MigError(f"{migmgr.FAIL_ANNOTATION} is true")
            if (namespace, cm) not in self.configmaps:
                self.configmaps[(namespace, cm)] = dict(self.api.read_namespaced_config_map(cm, namespace).data or {})
            configs = (yaml.safe_load(self.configmaps[(namespace, cm)].get("config.yaml") or "") or {}).get("mig-configs") or {}
            self.layouts[node] = migmgr.apply(self.profiles[node] or {}, configs, wanted)
        except Exception as exc:  # a config that cannot be applied, as mig-parted fails it
            self.mig_applied[node] = wanted  # not tried again until the label changes
            self._set_state(node, "failed")
            print(f"{time.strftime('%H:%M:%S')} {node}: MIG config {wanted} failed: {exc}", flush=True)
            return
        self.mig_applied[node] = wanted
        self.features.pop(node, None)
        self._set_state(node, "success")
        print(f"{time.strftime('%H:%M:%S')} {node}: MIG config {wanted} applied", flush=True)

    def _set_state(self, node: str, state: str) -> None:
        self.api.patch_node(node, {"metadata": {"labels": {migmgr.MIG_STATE: state}}})

    def sync_gfd(self, node: str) -> None:
        """Write the NodeFeature GFD would write, while a GFD pod runs on the node (it is left when the pod goes,
        as GFD leaves it until its DaemonSet is deleted)."""
        pods = sorted(set(self.gfd.get(node, {}).values()), key=repr)
        if self.custom is None or not pods:
            return
        pod = pods[0]
        labels = gfd.gfd_labels(self._profile(node), pod.mig_strategy, self._config(node, pod))
        if labels is None or self.features.get(node) == (labels, pod.owners):
            return
        body = gfd.node_feature(node, pod.namespace, labels, pod.owners)
        args = ("nfd.k8s-sigs.io", "v1alpha1", pod.namespace, "nodefeatures")
        try:
            current = self.custom.get_namespaced_custom_object(*args, body["metadata"]["name"])
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.custom.replace_namespaced_custom_object(*args, body["metadata"]["name"], body)
        except Exception as exc:  # not there yet (404): create it
            if getattr(exc, "status", None) != 404:
                raise
            self.custom.create_namespaced_custom_object(*args, body)
        self.features[node] = (labels, pod.owners)
        print(f"{time.strftime('%H:%M:%S')} {node}: GFD labels {labels.get('nvidia.com/gpu.product')} "
              f"x{labels.get('nvidia.com/gpu.replicas')}", flush=True)

    def sync_plugin(self, node: str) -> None:
        profile = self._profile(node)
        pods = sorted(set(self.pods.get(node, {}).values()), key=repr)
        want: dict[str, int] = {}
        if profile and pods:
            config = self._config(node, pods[0])
            if not uses_mps(config) or self.mps.get(node):
                want = shared(advertised(profile, pods[0].mig_strategy), config)
        have = self.applied.get(node)
        if want == have or (have is None and not want):
            return
        # Resources advertised before and not now drop to 0, as a kubelet reports them.
        patch = {key: "0" for key in (have or {})}
        patch.update({key: str(value) for key, value in want.items()})
        self.api.patch_node_status(node, {"status": {"capacity": patch, "allocatable": patch}})
        self.applied[node] = want
        print(f"{time.strftime('%H:%M:%S')} {node}: {want or 'no GPU resources'}", flush=True)


def run(kubeconfig: str) -> None:
    from kubernetes import client, config, watch
    from kubernetes.client.exceptions import ApiException

    config.load_kube_config(config_file=kubeconfig)
    api = client.CoreV1Api()
    sim = Simulator(api, client.CustomObjectsApi())
    for target in (_watch_nodes, _watch_configmaps):
        threading.Thread(target=target, args=(api, sim), daemon=True).start()
    while True:
        try:
            pods = api.list_pod_for_all_namespaces(label_selector=SELECTOR)
            with sim.lock:
                sim.resync(pods.items)
            stream = watch.Watch().stream(api.list_pod_for_all_namespaces, label_selector=SELECTOR,
                                          resource_version=pods.metadata.resource_version, timeout_seconds=300)
            for event in stream:
                with sim.lock:
                    sim.observe(event["object"], deleted=event["type"] == "DELETED")
        except ApiException as exc:
            # 410 Gone (an old resource version) and transient errors: list again.
            print(f"{time.strftime('%H:%M:%S')} relisting after API error {exc.status}", flush=True)
            time.sleep(1)
        except Exception as exc:  # keep simulating whatever went wrong; the log says what it was
            print(f"{time.strftime('%H:%M:%S')} error: {exc!r}", flush=True)
            time.sleep(1)


def _watch(list_call, handle) -> None:
    from kubernetes import watch

    while True:
        try:
            listed = list_call()
            for item in listed.items:
                handle(item, False)
            for event in watch.Watch().stream(list_call, resource_version=listed.metadata.resource_version, timeout_seconds=300):
                handle(event["object"], event["type"] == "DELETED")
        except Exception as exc:  # relist after any error (410 Gone included); the log says what it was
            print(f"{time.strftime('%H:%M:%S')} watch error, relisting: {exc!r}", flush=True)
            time.sleep(1)


def _watch_nodes(api, sim: Simulator) -> None:
    _watch(api.list_node, lambda node, _deleted: sim.node_changed(node))


def _watch_configmaps(api, sim: Simulator) -> None:
    _watch(api.list_config_map_for_all_namespaces, sim.configmap_changed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devplugin-sim", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(args.kubeconfig)
    return 0


if __name__ == "__main__":
    sys.exit(main())

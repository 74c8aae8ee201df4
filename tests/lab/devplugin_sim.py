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

When the last device plugin pod on a node goes, the node's NVIDIA resources drop to 0, as a kubelet does
when a plugin unregisters. The roles are tested for what they change; nothing is preset.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from .hardware import load_profile

SELECTOR = "app=nvidia-device-plugin-daemonset"
PROFILE_ANNOTATION = "gpuops-lab/profile"


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


def _mig_strategy(pod) -> str:
    for container in pod.spec.containers or []:
        for env in container.env or []:
            if env.name == "MIG_STRATEGY" and env.value:
                return env.value
    return "none"


class Simulator:
    def __init__(self, api) -> None:
        self.api = api
        self.pods: dict[str, dict[str, str]] = {}  # node -> {pod uid: MIG strategy} of running plugin pods
        self.applied: dict[str, dict[str, int]] = {}
        self.profiles: dict[str, dict | None] = {}

    def _profile(self, node: str) -> dict | None:
        if node not in self.profiles:
            meta = self.api.read_node(node).metadata
            name = (meta.annotations or {}).get(PROFILE_ANNOTATION)
            self.profiles[node] = load_profile(name) if name else None
        return self.profiles[node]

    def resync(self, pods) -> None:
        """After a (re)list: the listed pods are all there is; nodes whose pods went meanwhile drop theirs."""
        before = set(self.pods)
        self.pods = {}
        for pod in pods:
            self.observe(pod, sync=False)
        for node in sorted(before | set(self.pods)):
            self.sync(node)

    def observe(self, pod, deleted: bool = False, sync: bool = True) -> None:
        node = pod.spec.node_name
        if not node:
            return
        running = not deleted and pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
        on_node = self.pods.setdefault(node, {})
        if running:
            on_node[pod.metadata.uid] = _mig_strategy(pod)
        else:
            on_node.pop(pod.metadata.uid, None)
        if sync:
            self.sync(node)

    def sync(self, node: str) -> None:
        profile = self._profile(node)
        strategies = sorted(set(self.pods.get(node, {}).values()))
        want = advertised(profile, strategies[0]) if profile and strategies else {}
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
    sim = Simulator(api)
    while True:
        try:
            pods = api.list_pod_for_all_namespaces(label_selector=SELECTOR)
            sim.resync(pods.items)
            stream = watch.Watch().stream(api.list_pod_for_all_namespaces, label_selector=SELECTOR,
                                          resource_version=pods.metadata.resource_version, timeout_seconds=300)
            for event in stream:
                sim.observe(event["object"], deleted=event["type"] == "DELETED")
        except ApiException as exc:
            # 410 Gone (an old resource version) and transient errors: list again.
            print(f"{time.strftime('%H:%M:%S')} relisting after API error {exc.status}", flush=True)
            time.sleep(1)
        except Exception as exc:  # keep simulating whatever went wrong; the log says what it was
            print(f"{time.strftime('%H:%M:%S')} error: {exc!r}", flush=True)
            time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devplugin-sim", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run(args.kubeconfig)
    return 0


if __name__ == "__main__":
    sys.exit(main())

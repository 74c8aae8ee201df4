"""A real node for the lab cluster: a lab machine that runs a real kubelet and containerd (issue 61).

`lab up --real-node NAME` boots the machine with what a kubelet needs (nspawn_options) and `join` makes it a Node
of the running lab cluster:

- the node's client certificate, `system:node:<name>` in `system:nodes`, signed by the cluster's CA (as the Node
  authorizer and NodeRestriction expect a kubelet's), and the kubelet's kubeconfig;
- the kubelet's configuration, chosen by the host's cgroup version: on a v1 host the kubelet must be told
  `failCgroupV1: false`; cgroupfs as the driver and a `cgroupRoot` of its own, made by a unit inside the machine in
  every hierarchy (the machine's systemd does not delegate a slice to it; nspawn mounts the v1 controllers read-only);
- the sysctls the kubelet checks, as files with the values it wants, bound over /proc/sys by that unit inside the
  machine (systemd-nspawn 252 cannot bind a file under /proc; a machine shares the host's kernel, the kubelet must never
  write them);
- containerd from the distribution, told `restrict_oom_score_adj` (a machine may not lower its score), with the pause
  and device plugin images imported from the archives lab/nodebuild.py writes (no registry);
- the node's pod network: a CNI bridge (BRIDGE) with host-local addresses. The machine shares the host's network, so
  the bridge is the host's: pods reach the host, nothing else. The API server listens on 127.0.0.1 only; the
  `kubernetes` Service (SERVICE_IP, in the serving certificate's names: lab/cluster.py's kwokctl config) is
  DNATed from the bridge to it, with route_localnet on the bridge alone (there is no kube-proxy);
- the lane's settings checked before anything starts: a port in use or a missing host tool is one line.

`leave` undoes it: the Node, the DNAT rule, the bridge and the kubelet's cgroups on the host.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import re
import shlex
import shutil
import subprocess
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from .errors import LabError, require_free_port

if TYPE_CHECKING:
    from .cluster import Cluster
    from .machines import Lab, Machine
    from .nodebuild import NodeBuilds

# What the kubelet sets at start (its kernel tunables) unless told to only check them; a machine must not set them on
# the shared host kernel, so each is a file with the value the kubelet wants, bound over /proc/sys in the machine.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
    # The CNI bridge plugin, as the pods' gateway, turns forwarding on unless it reads it on: the pods only reach the
    # host itself (the API server through the Service DNAT), so the host's forwarding stays as it is.
    "net/ipv4/ip_forward": "1",
}
# The host tools the lane needs besides the lab's own.
LANE_TOOLS = ("systemd-nspawn", "gcc", "go", "ip")
CONTAINERD_SOCKET = "unix:///run/containerd/containerd.sock"
# Machine.extra's mark of a real node (cluster up makes no KWOK node for it; down makes it leave first).
REAL_NODE = "real_node"
# The `kubernetes` Service's address in the lab cluster (the first of kube-apiserver's default service range): kwokctl
# puts it in the serving certificate's names (lab/cluster.py), so a pod's in-cluster config trusts the API server.
SERVICE_IP = "10.0.0.1"
CLUSTER_DNS = "10.0.0.10"  # no DNS runs; the kubelet wants an address for pods' resolv.conf
POD_CIDR = "10.244.61.0/24"
# The pod network's bridge, the host's (the machine shares its network): a name no other tool uses, 15 characters at most.
BRIDGE = "gpuopslab0"
DISTRO = "noble"
# Where the node's files live inside the machine.
SYSCTL_DIR = "/var/lib/gpuops-lab/sysctl"
IMAGES_DIR = "/var/lib/gpuops-lab/images"
PREP_SCRIPT = "/usr/local/sbin/gpuops-lab-node-prep"
PREP_UNIT = "gpuops-lab-node-prep.service"
IPTABLES = ("iptables", "iptables-legacy")


def host_cgroup_v2(root: Path = Path("/sys/fs/cgroup")) -> bool:
    """Whether the host runs the unified hierarchy (cgroup v2): its root holds cgroup.controllers."""
    return (root / "cgroup.controllers").is_file()


def cgroup_root(node: str) -> str:
    """The kubelet's cgroupRoot: on a v1 host nspawn gives the machine the host's controller hierarchies, so the
    cgroup is the host's too, named after the node for `leave` to remove."""
    return f"/gpuops-lab-kubelet-{node}"


def kubelet_config(cgroup_v2: bool, cluster_dns: str, pod_cidr: str, root: str = "/kubelet") -> dict:
    """The KubeletConfiguration of the lab's real node."""
    ipaddress.ip_address(cluster_dns)
    ipaddress.ip_network(pod_cidr)
    config: dict = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": "/var/lib/kubelet/pki/ca.crt"}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": root,
        "clusterDNS": [cluster_dns],
        "clusterDomain": "cluster.local",
        "containerRuntimeEndpoint": CONTAINERD_SOCKET,
        "podCIDR": pod_cidr,
        "failSwapOn": False,
        "protectKernelDefaults": True,  # check the bound sysctl files, never write them
        "makeIPTablesUtilChains": False,
        "resolvConf": "/etc/resolv.conf",  # nspawn copies the host's there
        "registerNode": True,
        "serializeImagePulls": False,
    }
    if not cgroup_v2:
        config["failCgroupV1"] = False
    return config


def node_certificate(ca_cert_pem: bytes, ca_key_pem: bytes, node: str, days: int = 30) -> tuple[bytes, bytes]:
    """A kubelet's client certificate and key for `node`, signed by the cluster's CA (PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not node or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-." for c in node):
        raise LabError(f"node name {node!r}: give a DNS-1123 name (lower case letters, digits, '-', '.')")
    with warnings.catch_warnings():  # kwokctl's CA has a serial number RFC 5280 disallows (zero); it is what the cluster trusts
        warnings.simplefilter("ignore")
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def kubelet_kubeconfig(server: str, node: str) -> dict:
    """The kubelet's kubeconfig; the CA, certificate and key are files beside it in /var/lib/kubelet/pki."""
    pki = "/var/lib/kubelet/pki"
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority": f"{pki}/ca.crt"}}],
        "users": [{"name": f"system:node:{node}",
                   "user": {"client-certificate": f"{pki}/kubelet-client.crt", "client-key": f"{pki}/kubelet-client.key"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": f"system:node:{node}"}}],
    }


def cni_conflist(pod_cidr: str, bridge: str = BRIDGE) -> dict:
    """The node's pod network: a bridge (the host's) with host-local addresses from the node's pod CIDR. No masquerade
    and no portmap: both need iptables chains on the host, and pods reach only the host (the API server through the
    Service DNAT)."""
    net = ipaddress.ip_network(pod_cidr)
    gateway = str(next(net.hosts()))
    return {
        "cniVersion": "1.0.0", "name": "gpuops-lab",
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": str(net), "gateway": gateway}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        ],
    }


def sysctl_files() -> dict[str, str]:
    """Each sysctl the kubelet checks as a file inside the machine (under SYSCTL_DIR) and its content."""
    return {f"{SYSCTL_DIR}/{name.replace('/', '.')}": value + "\n" for name, value in sorted(KUBELET_SYSCTLS.items())}


def prep_script(root: str, dev_dir: str = "") -> str:
    """What the machine does at each boot before containerd and the kubelet: bind the sysctl files over /proc/sys
    (read-only), make the cgroup hierarchies writable and the kubelet's cgroupRoot in each (its cpuset copied from the
    parent, which a new v1 cpuset cgroup does not inherit), and give /dev the GPUs' device nodes from dev_dir (the
    simulated driver root's dev/), as a node whose driver is loaded has them: the device plugin names /dev/nvidia*
    to the kubelet (PASS_DEVICE_SPECS) and containerd stats each one. They are bound from there, the same nodes (mknod was not tried in a machine)."""
    devices = "" if not dev_dir else f"""for d in {dev_dir}/nvidia*; do
  [ -c "$d" ] || continue
  target=/dev/$(basename "$d")
  [ -e "$target" ] || {{ touch "$target" && mount --bind "$d" "$target"; }}
done
"""
    return f"""#!/bin/sh
# gpuops lab: prepare this machine for a kubelet (lab/realnode.py). Run by {PREP_UNIT} at boot.
set -eu
for f in {SYSCTL_DIR}/*; do
  target=/proc/sys/$(basename "$f" | tr . /)
  mount --bind "$f" "$target"
  mount -o remount,bind,ro "$target"
done
for h in /sys/fs/cgroup/*; do
  [ -d "$h" ] && [ ! -L "$h" ] && [ -e "$h/cgroup.procs" ] || continue
  [ "$(basename "$h")" = unified ] && continue
  mount -o remount,bind,rw "$h" 2>/dev/null || mount -o remount,rw "$h"
  mkdir -p "$h{root}"
  if [ -e "$h/cpuset.cpus" ]; then
    cat "$h/cpuset.cpus" > "$h{root}/cpuset.cpus"
    cat "$h/cpuset.mems" > "$h{root}/cpuset.mems"
  fi
done
{devices}"""


PREP_UNIT_TEXT = f"""[Unit]
Description=gpuops lab: sysctls and cgroups for the kubelet
DefaultDependencies=no
After=local-fs.target
Before=containerd.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={PREP_SCRIPT}

[Install]
WantedBy=multi-user.target
"""

KUBELET_UNIT = f"""[Unit]
Description=kubelet (gpuops lab real node)
Requires={PREP_UNIT} containerd.service
After={PREP_UNIT} containerd.service

[Service]
ExecStart=/usr/local/bin/kubelet --config=/var/lib/kubelet/config.yaml --kubeconfig=/var/lib/kubelet/kubeconfig \\
  --hostname-override=%H --v=1
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
"""


def containerd_config(pause_image: str) -> str:
    """containerd 1.7's config for the node: the kubelet's cgroupfs driver (runc's default), the lab's pause image,
    and restrict_oom_score_adj (a machine may not lower a process's OOM score below its own). The toolkit role adds
    the nvidia runtime and CDI to it."""
    return f"""version = 2

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "{pause_image}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
"""


def service_dnat_rule(api_port: int, bridge: str = BRIDGE, service_ip: str = SERVICE_IP) -> list[str]:
    """iptables' words (after -A/-C/-D) of the rule that sends a pod's connection to the `kubernetes` Service to the
    API server on the host's loopback."""
    return ["PREROUTING", "-i", bridge, "-d", f"{service_ip}/32", "-p", "tcp", "--dport", "443", "-m", "comment", "--comment",
            "gpuops-lab real node: kubernetes Service", "-j", "DNAT", "--to-destination", f"127.0.0.1:{api_port}"]


def nspawn_options() -> list[str]:
    """What systemd-nspawn gives a machine that runs a kubelet and containers (besides the lab's usual options). The
    sysctls are bound inside the machine (prep_script): nspawn 252 cannot bind a file under /proc."""
    return ["--bind=/dev/kmsg", "--capability=all", "--system-call-filter=add_key keyctl request_key"]


def api_server(kubeconfig: Path) -> tuple[str, int]:
    """The API server's URL in the cluster's kubeconfig, and its port."""
    config = yaml.safe_load(kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    port = server.rsplit(":", 1)[1].rstrip("/")
    return server, int(port)


def _write(root: Path, path: str, text: str | bytes, mode: int = 0o644) -> None:
    dest = root / path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        dest.write_bytes(text)
    else:
        dest.write_text(text)
    dest.chmod(mode)


def _copy(src: Path, root: Path, path: str, mode: int = 0o755) -> None:
    dest = root / path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    dest.chmod(mode)


def driver_root_nvml(root: Path, machine_root: Path, nvml: Path, version: str) -> None:
    """Put a copy of the fake NVML that carries the node's configuration compiled in at the driver root's
    libnvidia-ml.so.<version>, with libnvidia-ml.so.1 a relative link beside it: the copy CDI injects into a container
    is that file alone (the hardware tree's link out of the driver root would dangle there)."""
    lib = machine_root / root.relative_to("/") / "usr/lib/x86_64-linux-gnu"
    target = lib / f"libnvidia-ml.so.{version}"
    target.unlink(missing_ok=True)
    shutil.copyfile(nvml, target)
    target.chmod(0o755)
    link = lib / "libnvidia-ml.so.1"
    link.unlink(missing_ok=True)
    link.symlink_to(target.name)


def write_node_files(machine: Machine, cluster: Cluster, builds: NodeBuilds, cgroup_v2: bool, dev_dir: str = "") -> None:
    """Everything the node needs written into the machine's root from the host: kubelet, CNI, configs, certificates,
    the prep unit, the image archives."""
    root, node = machine.root, machine.name
    pki = cluster.workdir / "clusters" / cluster_name() / "pki"
    ca_cert, ca_key = (pki / "ca.crt").read_bytes(), (pki / "ca.key").read_bytes()
    cert, key = node_certificate(ca_cert, ca_key, node)
    server, _port = api_server(cluster.kubeconfig)
    _write(root, "/var/lib/kubelet/pki/ca.crt", ca_cert)
    _write(root, "/var/lib/kubelet/pki/kubelet-client.crt", cert)
    _write(root, "/var/lib/kubelet/pki/kubelet-client.key", key, 0o600)
    _write(root, "/var/lib/kubelet/kubeconfig", yaml.safe_dump(kubelet_kubeconfig(server, node)), 0o600)
    _write(root, "/var/lib/kubelet/config.yaml", yaml.safe_dump(kubelet_config(cgroup_v2, CLUSTER_DNS, POD_CIDR, cgroup_root(node))))
    _copy(builds.kubelet, root, "/usr/local/bin/kubelet")
    for plugin in sorted(builds.cni_bin.iterdir()):
        _copy(plugin, root, f"/opt/cni/bin/{plugin.name}")
    _write(root, "/etc/cni/net.d/10-gpuops-lab.conflist", json.dumps(cni_conflist(POD_CIDR), indent=2) + "\n")
    for path, value in sysctl_files().items():
        _write(root, path, value, 0o444)
    _write(root, PREP_SCRIPT, prep_script(cgroup_root(node), dev_dir), 0o755)
    _write(root, f"/etc/systemd/system/{PREP_UNIT}", PREP_UNIT_TEXT)
    _write(root, "/etc/systemd/system/kubelet.service", KUBELET_UNIT)
    archives = [builds.pause_archive, builds.device_plugin_archive, builds.probe_archive]
    for n, archive in enumerate(archives):
        _copy(archive, root, f"{IMAGES_DIR}/{n}-{archive.parent.name}.tar", 0o644)


def cluster_name() -> str:
    from .cluster import CLUSTER_NAME
    return CLUSTER_NAME


class _Remote:
    """Commands on the machine over SSH, each failure one line naming the step."""

    def __init__(self, lab: Lab, machine: Machine, log: Path) -> None:
        self.lab, self.machine, self.log = lab, machine, log

    def __call__(self, what: str, script: str, timeout: float = 600, check: bool = True) -> str:
        res = subprocess.run(self.lab.ssh_command(self.machine, "bash", "-euo", "pipefail", "-c", shlex.quote(script)),
                             capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout, check=False)
        with self.log.open("a") as fh:
            fh.write(f"$ [{self.machine.name}] {script}\n{res.stdout}{res.stderr}\n")
        if check and res.returncode != 0:
            lines = [ln for ln in (res.stderr or res.stdout).strip().splitlines() if ln.strip()]
            raise LabError(f"real node {self.machine.name}: {what} failed: {lines[-1] if lines else res.returncode} (log: {self.log})")
        return res.stdout


def _journal(unit: str) -> str:
    """Shell words that put a failed unit's last lines on stderr (where _Remote takes its one line from) and fail."""
    return f"{{ journalctl -u {unit} -n 3 --no-pager -o cat >&2; exit 1; }}"


def _bridge_up(bridge: str = BRIDGE) -> None:
    """Make the pod bridge on the host (the CNI plugin then uses it) and let packets DNATed to 127.0.0.1 through it."""
    if not Path(f"/sys/class/net/{bridge}").exists():
        subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True, capture_output=True)
    subprocess.run(["ip", "link", "set", bridge, "up"], check=True, capture_output=True)
    Path(f"/proc/sys/net/ipv4/conf/{bridge}/route_localnet").write_text("1\n")


def containerd_install(series: str = "") -> str:
    """The shell that installs containerd from the machine's archive: the newest it has, or the newest of a series
    ("1.7": Ubuntu 24.04's release pocket has 1.7.12, its updates 2.2), with iptables. A series the archive lacks is
    one line naming what it has."""
    if not series:
        return "apt-get install -y -q --no-install-recommends containerd iptables"
    if not re.fullmatch(r"[0-9]+\.[0-9]+", series):
        raise LabError(f"--real-node-containerd {series!r}: a release series such as 1.7, or nothing for the archive's newest")
    pattern = series.replace(".", "\\.")
    return (f"v=$(apt-cache madison containerd | awk '$3 ~ /^{pattern}\\./ && !v {{v = $3}} END {{print v}}'); "
            f"[ -n \"$v\" ] || {{ echo \"the archive has no containerd {series}: $(apt-cache madison containerd | awk '{{print $3}}' "
            f"| tr '\\n' ' ')\" >&2; exit 1; }}; "
            "apt-get install -y -q --no-install-recommends \"containerd=$v\" iptables")


def join(lab: Lab, machine: Machine, cluster: Cluster, builds: NodeBuilds, nvml: Path, progress=print, timeout: float = 240,
         containerd: str = "") -> None:
    """Make the booted machine a Node of the running lab cluster (containerd: a release series, or the newest)."""
    from .sim.hardware import HW_PATH, load_profile

    t0 = time.monotonic()
    state = cluster.load()
    if state is None or not state.pids or not all(state.alive(n) for n in state.pids):
        raise LabError(f"real node {machine.name}: no lab cluster runs (state {cluster.dir}); start it first: lab cluster up")
    service_ip = cluster.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}").strip()
    if service_ip != SERVICE_IP:
        raise LabError(f"real node {machine.name}: the kubernetes Service is {service_ip}, not {SERVICE_IP} as the API server's "
                       "certificate names it (lab/cluster.py's kwokctl config)")
    _server, api_port = api_server(cluster.kubeconfig)
    # Recorded first: what `stop` undoes on the host (lab.save after join, or the stop of a failed join) reads them.
    machine.extra[REAL_NODE] = "true"
    machine.extra["api_port"] = str(api_port)
    log = join_log(lab, machine)
    log.parent.mkdir(parents=True, exist_ok=True)
    remote = _Remote(lab, machine, log)
    profile = load_profile(machine.profile)
    driver = profile.get("driver") or {}
    write_node_files(machine, cluster, builds, host_cgroup_v2(), f"{HW_PATH}/driver/dev" if driver.get("loaded") else "")
    if driver.get("loaded"):
        driver_root_nvml(Path(HW_PATH) / "driver", machine.root, nvml, driver["version"])
    remote(f"installing containerd {containerd or '(the newest)'} and iptables",
           f"export DEBIAN_FRONTEND=noninteractive; apt-get update -q && {containerd_install(containerd)}")
    _write(machine.root, "/etc/containerd/config.toml", containerd_config(builds.pause_image))
    remote("starting containerd and importing the images",
           f"systemctl daemon-reload && {{ systemctl enable -q --now {PREP_UNIT} || {_journal(PREP_UNIT)}; }} && "
           f"systemctl restart containerd && "
           f"for a in {IMAGES_DIR}/*.tar; do ctr -n k8s.io images import \"$a\" >/dev/null; done")
    _bridge_up()
    rule = shlex.join(service_dnat_rule(api_port))
    # nftables (noble's default iptables) where the host kernel has it, else the legacy tables.
    remote("routing the kubernetes Service to the API server",
           " || ".join(f"{ipt} -t nat -C {rule} 2>/dev/null || {ipt} -t nat -A {rule}" for ipt in IPTABLES))
    remote("starting the kubelet", "systemctl enable -q --now kubelet")
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.wait_ready({machine.name}, min(10.0, max(1.0, deadline - time.monotonic())))
            break
        except LabError:
            if time.monotonic() > deadline:
                tail = remote("reading the kubelet's log", "journalctl -u kubelet -n 5 --no-pager -o cat", check=False).strip()
                raise LabError(f"real node {machine.name}: Node not Ready after {timeout:.0f}s; the kubelet says: "
                               f"{tail.splitlines()[-1] if tail else 'nothing'} (log: {log})") from None
    # GFD's labels reach the Node through nfd-master, which a cluster created without nodes has not started.
    cluster.ensure_nfd_master(machine.name)
    progress(f"lab real node {machine.name}: joined the lab cluster, Ready in {time.monotonic() - t0:.0f}s")


def join_log(lab: Lab, machine: Machine) -> Path:
    """The join's log, beside the machine's directory so that it outlives a failed join's machine."""
    return lab.dir / f"real-node-{machine.name}.log"


def save_journal(lab: Lab, machine: Machine) -> None:
    """After a failed join, before its machine stops: the node's units' journal into the join's log (best effort)."""
    units = " ".join(f"-u {u}" for u in (PREP_UNIT, "containerd", "kubelet"))
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        _Remote(lab, machine, join_log(lab, machine))("reading the journal", f"journalctl {units} -n 300 --no-pager", timeout=30, check=False)


def host_cgroups(node: str, cgroup_fs: Path = Path("/sys/fs/cgroup")) -> list[Path]:
    """The kubelet's cgroups of this node on the host (cgroup_root in each hierarchy that has it)."""
    rel = cgroup_root(node).lstrip("/")
    if not cgroup_fs.is_dir():
        return []
    return sorted(h / rel for h in cgroup_fs.iterdir() if not h.is_symlink() and (h / rel).is_dir())


def delete_node(cluster: Cluster, machine: Machine, progress=print) -> None:
    """The real node's Node, from a cluster that still runs (`lab down` before it stops the machine)."""
    state = cluster.load()
    if state is None or not state.pids or not all(state.alive(n) for n in state.pids):
        return
    try:
        cluster.kubectl("delete", "node", machine.name, "--ignore-not-found", "--wait=false", timeout=30)
    except (LabError, subprocess.TimeoutExpired) as exc:
        progress(f"lab real node {machine.name}: could not delete its Node ({exc})")


def cleanup_host(machine: Machine) -> None:
    """Once the machine (and every container in it) is gone, what it left on the host: the Service's DNAT rule (removed
    with the machine's own iptables, run from the host, which has none: the rule is in the host's tables, the machine
    shares its network), the pod bridge and the kubelet's cgroups."""
    from .cgroups import remove_cgroup

    api_port = machine.extra.get("api_port")
    for ipt in IPTABLES:
        binary = machine.root / "usr/sbin" / ipt
        if not api_port or not (binary.exists() or binary.is_symlink()):
            continue
        rule = service_dnat_rule(int(api_port))
        for _attempt in range(10):  # every copy of the rule, never forever
            if subprocess.run(["chroot", str(machine.root), ipt, "-t", "nat", "-D", *rule], capture_output=True,
                              check=False).returncode != 0:
                break
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        subprocess.run(["ip", "link", "del", BRIDGE], check=False, capture_output=True)
    for cgroup in host_cgroups(machine.name):
        remove_cgroup(cgroup)


def check_lane_settings(ports: list[int], tools: tuple[str, ...] = LANE_TOOLS) -> None:
    """Raise one LabError line for a port already in use on 127.0.0.1 or a missing host tool, before anything starts."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise LabError(f"the real-node lane needs {', '.join(missing)} on this host ('make lab-deps')")
    for port in ports:
        require_free_port(port, "choose another base port (GPUOPS_MOLECULE_BASE_PORT)")

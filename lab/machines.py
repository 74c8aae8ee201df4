"""Lab machines: copies of an image booted with systemd-nspawn, reached over SSH on loopback.

Each machine shares the host's network, so its sshd listens on 127.0.0.1 on a port of its own.
Each machine's systemd-nspawn runs under a supervisor (lab/supervise.py) that boots it again when
the machine reboots. The supervisor's PID is recorded in the state file, the running nspawn's PID in
the machine's directory; `down` stops exactly those processes (after checking that each PID still
belongs to that machine) and removes the machine directories. Nothing is ever stopped by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .cgroups import parse_own, remove_cgroup
from .distros import get_distro, nspawn_environment
from .errors import LabError
from .images import NSPAWN_COMMON, cache_dir, ensure_images, lab_dir
from .realnode import REAL_NODE, cleanup_host, nspawn_options
from .sim.hardware import HW_PATH, build_fake_nvml, install_boot_simulation, load_profile, register_nvml_package, write_hardware
from .supervise import process_alive

DEFAULT_BASE_PORT = 2221
SUPERVISOR_MODULE = "lab.supervise"
NSPAWN_PID_FILE = "nspawn.pid"
# Where a machine started with a compiler cache finds it (ccache's cache_dir, see molecule/shared/compiler_cache.yml):
# the host's ~/.cache/gpuops-lab/ccache/<distro>, bound in, so a rerun's DKMS builds still compile but hit the cache.
COMPILER_CACHE_MOUNT = "/var/cache/gpuops-lab/ccache"
_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# Every machine gets fresh host keys when it is made, so there is nothing to pin or remember.
SSH_OPTIONS = (
    "StrictHostKeyChecking=no",
    "UserKnownHostsFile=/dev/null",
    "LogLevel=ERROR",
    "ConnectTimeout=3",
)


def ssh_option_args(*extra: str) -> list[str]:
    """SSH_OPTIONS (and any extra Key=Value) as ssh's -o arguments."""
    return [arg for opt in (*SSH_OPTIONS, *extra) for arg in ("-o", opt)]


def compiler_cache_dir(distro: str) -> Path:
    """The host's compiler cache for one distribution's machines (each has its own ccache version and compilers)."""
    return cache_dir() / "ccache" / distro


def nspawn_command(machine: Machine) -> list[str]:
    """The systemd-nspawn command line that boots the machine (the same at every boot, reboots included)."""
    binds = [f"--bind={machine.extra['compiler_cache']}:{COMPILER_CACHE_MOUNT}"] if machine.extra.get("compiler_cache") else []
    # A real node (lab/realnode.py) runs a kubelet and containers: /dev/kmsg, every capability, the key syscalls.
    if machine.extra.get(REAL_NODE):
        binds += nspawn_options()
    return [
        "systemd-nspawn",
        *NSPAWN_COMMON,
        "--boot",
        "--quiet",
        "--console=read-only",
        *binds,
        f"--machine={machine.name}",
        "-D",
        str(machine.root),
    ]


CGROUP_FS = Path("/sys/fs/cgroup")
DPKG_UNSAFE_IO = "gpuops-lab-unsafe-io"
NO_CONSOLE_OUTPUT = "no console output"


def machine_cgroups(leaf: str, cgroup_fs: Path = CGROUP_FS, self_cgroup: str | None = None) -> list[Path]:
    """The cgroups a machine's nspawn joins: `leaf` below this process's cgroup in every hierarchy systemd uses.

    A cgroup v2 host has one hierarchy. A v1 host has v1's name=systemd and, in systemd's hybrid
    mode (which nspawn sets up for the machines), cgroup v2 at `unified`. self_cgroup is the text of
    /proc/self/cgroup (for tests).
    """
    text = self_cgroup if self_cgroup is not None else Path("/proc/self/cgroup").read_text()
    own = {hierarchy: path.lstrip("/") for hierarchy, path in parse_own(text).items()}
    if (cgroup_fs / "cgroup.controllers").exists():
        return [cgroup_fs / own.get("v2", "") / leaf]
    found = []
    if (cgroup_fs / "systemd").is_dir() and "name=systemd" in own:
        found.append(cgroup_fs / "systemd" / own["name=systemd"] / leaf)
    if (cgroup_fs / "unified/cgroup.procs").exists() and "v2" in own:
        found.append(cgroup_fs / "unified" / own["v2"] / leaf)
    return found


def ensure_unified_hierarchy(cgroup_fs: Path = CGROUP_FS) -> None:
    """On a cgroup v1 host, mount cgroup v2 at `unified` as systemd-nspawn does for hybrid machines.

    nspawn mounts it itself at the first boot; mounting it first lets every machine, the first
    ones included, get a cgroup v2 subtree of its own.
    """
    unified = cgroup_fs / "unified"
    if (cgroup_fs / "cgroup.controllers").exists() or (unified / "cgroup.procs").exists():
        return
    if not (cgroup_fs / "systemd").is_dir():
        return
    unified.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "cgroup2", "-o", "nosuid,nodev,noexec", "cgroup2", str(unified)], check=True)


def state_dir() -> Path:
    """Where running machines live: $GPUOPS_LAB_STATE or ~/.local/state/gpuops-lab."""
    return lab_dir("GPUOPS_LAB_STATE", "XDG_STATE_HOME", ".local/state")


@dataclass(frozen=True)
class MachineSpec:
    """What the user asked for: a name, a distribution and, optionally, a hardware profile."""

    name: str
    distro: str
    profile: str = ""


def parse_machine_spec(text: str) -> MachineSpec:
    """Parse NAME=DISTRO[:PROFILE], checking every part."""
    name, sep, rest = text.partition("=")
    distro, _colon, profile = rest.partition(":")
    if not sep or not name or not distro:
        raise LabError(f"bad machine {text!r}: expected NAME=DISTRO[:PROFILE], for example gpu1=noble:hgx-h100")
    if not _NAME_RE.match(name):
        raise LabError(f"bad machine name {name!r}: use lower-case letters, digits and '-' (a valid host name)")
    if profile:
        load_profile(profile)
    return MachineSpec(name, get_distro(distro).name, profile)


def check_specs(specs: list[MachineSpec]) -> None:
    """Refuse duplicate names and an empty list."""
    if not specs:
        raise LabError("no machines given")
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise LabError(f"machine name {spec.name!r} is given twice")
        seen.add(spec.name)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something already listens on host:port.

    SO_REUSEADDR as sshd uses it: connections of a machine stopped a moment ago, left in TIME_WAIT,
    do not make the port busy.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def assign_ports(specs: list[MachineSpec], base_port: int, taken: set[int]) -> dict[str, int]:
    """Give each machine the lowest port from base_port up that the lab does not already use.

    A port that another program holds is an error naming it, not silently skipped: the user
    chose the range, and the inventory of a second lab must not drift.
    """
    if not 1024 <= base_port <= 65535 - len(specs) - len(taken):
        raise LabError(f"base port {base_port} is out of range: use 1024..{65535 - len(specs) - len(taken)}")
    ports = {}
    port = base_port
    for spec in specs:
        while port in taken:
            port += 1
        if port_in_use(port):
            raise LabError(f"port {port} on 127.0.0.1 is already in use (wanted for {spec.name}): pick another --base-port")
        ports[spec.name] = port
        port += 1
    return ports


@dataclass
class Machine:
    """A machine the lab started, as recorded in the state file."""

    name: str
    distro: str
    port: int
    directory: str
    profile: str = ""
    pid: int = 0
    image: str = ""
    started: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return Path(self.directory) / "root"


# Every machine's systemd, logind and dbus, and a real node's kubelet and containerd, take inotify instances from one
# per-user limit of the host's kernel (the machines' root is the host's root). The kernel's default, 128, ran out with
# make test's lanes and a real node side by side ("Failed to create inotify object: Too many open files", units
# failed). containerd's shims take one each (k3s-io/k3s#10020, the same cause and raise).
INOTIFY_INSTANCES = 1024
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def ensure_inotify_instances(limit: Path = INOTIFY_LIMIT, wanted: int = INOTIFY_INSTANCES) -> bool:
    """Raise the host's inotify instance limit to `wanted` where it is lower (never lower it); True if raised."""
    try:
        have = int(limit.read_text().strip())
    except (OSError, ValueError):
        return False
    if have >= wanted:
        return False
    try:
        limit.write_text(f"{wanted}\n")
    except OSError as exc:
        raise LabError(f"the host's fs.inotify.max_user_instances is {have}: lab machines need {wanted} "
                       f"(sysctl -w fs.inotify.max_user_instances={wanted} as root): {exc}") from exc
    return True


class Lab:
    """The lab's state directory: its machines, its SSH key and the state file."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory or state_dir()
        self.state_file = self.dir / "lab.json"
        self.key = self.dir / "id_ed25519"
        # The supervisors this object started, by machine name: how one that died at once ended.
        self._supervisors: dict[str, subprocess.Popen[bytes]] = {}

    # -- state -------------------------------------------------------------------------------
    def load(self) -> dict[str, Machine]:
        if not self.state_file.exists():
            return {}
        data = json.loads(self.state_file.read_text())
        return {name: Machine(**m) for name, m in data.get("machines", {}).items()}

    def save(self, machines: dict[str, Machine]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"machines": {n: asdict(m) for n, m in machines.items()}}, indent=2) + "\n")
        tmp.replace(self.state_file)

    def ensure_key(self) -> Path:
        if not self.key.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuops-lab", "-f", str(self.key)],
                check=True,
                stdin=subprocess.DEVNULL,
            )
        return self.key

    # -- process checks ----------------------------------------------------------------------
    @staticmethod
    def is_ours(machine: Machine) -> bool:
        """Whether machine.pid is alive and still the supervisor we started for this machine."""
        argv = _cmdline(machine.pid)
        if "-m" not in argv or "--" not in argv:
            return False
        module = argv.index("-m") + 1
        return module < len(argv) and argv[module] == SUPERVISOR_MODULE and machine.directory + "/root" in argv[argv.index("--") :]

    @staticmethod
    def nspawn_pid(machine: Machine) -> int:
        """The PID of the machine's running systemd-nspawn (0 if none): read from the supervisor's PID
        file, and only while that PID is still the systemd-nspawn of this machine."""
        try:
            pid = int((Path(machine.directory) / NSPAWN_PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return 0
        return pid if _is_nspawn_of(pid, machine) else 0

    def processes_inside(self, machine: Machine) -> list[int]:
        """PIDs of processes whose root directory is this machine's (what `down` must leave none of)."""
        root = str(machine.root)
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                target = os.readlink(proc / "root")
            except OSError:
                continue
            if target == root or target.startswith(root + "/"):
                pids.append(int(proc.name))
        return pids

    # -- lifecycle ---------------------------------------------------------------------------
    def prepare_root(self, machine: Machine, image: Path, nvml_library: Path | None = None) -> None:
        """Unpack the image and make it this machine: host name, sshd port, keys, simulated hardware."""
        root = machine.root
        shutil.rmtree(machine.directory, ignore_errors=True)
        root.mkdir(parents=True)
        subprocess.run(
            ["tar", "--numeric-owner", "-I", "zstd -T0", "-xf", str(image), "-C", str(root)],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        (root / "etc/hostname").write_text(machine.name + "\n")
        hosts = root / "etc/hosts"
        hosts.write_text(f"127.0.0.1 localhost\n127.0.1.1 {machine.name}\n::1 localhost ip6-localhost ip6-loopback\n")
        sshd_d = root / "etc/ssh/sshd_config.d"
        sshd_d.mkdir(parents=True, exist_ok=True)
        (sshd_d / "10-gpuops-lab.conf").write_text(
            f"# The lab machine shares the host's network: listen on loopback, on this machine's port.\n"
            f"Port {machine.port}\nListenAddress 127.0.0.1\nPermitRootLogin prohibit-password\n"
            f"PasswordAuthentication no\nUseDNS no\n"
        )
        # dpkg syncs every file it unpacks; on a lab host with two lanes of tests beside, those waits add minutes to a
        # driver install. A lab machine's files need not survive a power cut (Debian's container images do the same).
        dpkg_d = root / "etc/dpkg/dpkg.cfg.d"
        dpkg_d.mkdir(parents=True, exist_ok=True)
        (dpkg_d / DPKG_UNSAFE_IO).write_text("# The lab machine: no fsync per unpacked file (lab/machines.py).\nforce-unsafe-io\n")
        ssh_dir = root / "root/.ssh"
        ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        auth = ssh_dir / "authorized_keys"
        auth.write_text(self.key.with_suffix(".pub").read_text())
        auth.chmod(0o600)
        # ssh-keygen -A with -f writes the host keys under a prefix: this machine's own keys.
        subprocess.run(["ssh-keygen", "-A", "-f", str(root)], check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        if machine.profile:
            profile, host_kernel = load_profile(machine.profile), os.uname().release
            write_hardware(profile, root / HW_PATH.lstrip("/"), machine.name, host_kernel, nvml_library)
            install_boot_simulation(profile, root, host_kernel)
            if profile.get("gpus") and nvml_library is not None:
                register_nvml_package(root)

    def boot(self, machine: Machine) -> None:
        """Start the machine's supervisor (which starts systemd-nspawn) in the background; record its PID.

        With --keep-unit, nspawn hands its own cgroups to the machine's systemd as the machine's
        roots. Machines started from the same cgroup would share those trees, and their systemd
        instances remove each other's unit cgroups (units fail with 219/CGROUP), so each nspawn
        first moves into a cgroup of its own in every hierarchy systemd uses; the supervisor makes
        those cgroups afresh before every boot, the boots after a reboot included.
        """
        ensure_unified_hierarchy()
        cgroups = machine_cgroups(f"gpuops-lab.{machine.name}.{machine.port}")
        machine.extra["cgroups"] = ":".join(str(c) for c in cgroups)
        self.supervise(machine, nspawn_command(machine), cgroups, nspawn_environment(machine.distro))

    def supervise(self, machine: Machine, cmd: list[str], cgroups: list[Path], env: dict[str, str] | None = None) -> None:
        """Start `python -m lab.supervise ... -- CMD` for the machine, in its own session, logging to its console log.

        env: variables set for the supervisor, and so for CMD at every boot, over this process's environment."""
        log = Path(machine.directory) / "console.log"
        argv = [sys.executable, "-m", SUPERVISOR_MODULE, "--pid-file", str(Path(machine.directory) / NSPAWN_PID_FILE)]
        for cgroup in cgroups:
            argv += ["--cgroup", str(cgroup)]
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [*argv, "--", *cmd],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **env} if env else None,
                # `-m lab.supervise` finds the lab package from here, whatever the caller's directory.
                cwd=str(Path(__file__).resolve().parents[1]),
            )
        machine.pid = proc.pid
        machine.started = time.time()
        self._supervisors[machine.name] = proc
        # Popen returns once the child is in execve, and for a moment after that (long on a loaded host) its
        # /proc/PID/cmdline still reads empty: is_ours would take the supervisor for someone else's process, and the
        # boot for a failed one ("exited while booting: no console output" in CI). Its argv is there before it runs.
        deadline = time.monotonic() + 30.0
        while not _cmdline(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)

    def supervisor_end(self, machine: Machine) -> str:
        """How the machine's supervisor ended, as far as this process can tell (it is our child when we started it)."""
        proc = self._supervisors.get(machine.name)
        if proc is None or proc.pid != machine.pid:
            return "supervisor gone"
        try:
            status = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "supervisor still running but no longer recognisable as this machine's"
        if status < 0:
            return f"supervisor killed by {signal.Signals(-status).name}"
        return f"supervisor exited with status {status}"

    def ssh_command(self, machine: Machine, *remote: str) -> list[str]:
        return ["ssh", "-i", str(self.key), "-p", str(machine.port), *ssh_option_args("BatchMode=yes"), "root@127.0.0.1", *remote]

    def wait_ready(self, machine: Machine, timeout: float) -> str:
        """Wait until SSH answers and systemd has finished booting; return systemd's state."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.is_ours(machine):
                tail = _tail(Path(machine.directory) / "console.log")
                raise LabError(f"machine {machine.name} exited while booting: {tail} ({self.supervisor_end(machine)})")
            res = subprocess.run(
                self.ssh_command(machine, "systemctl", "is-system-running", "--wait"),
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=max(5.0, deadline - time.monotonic()),
                check=False,
            )
            state = res.stdout.strip()
            if state in ("running", "degraded"):
                return state
            last = (res.stderr or res.stdout).strip() or f"ssh exit {res.returncode}"
            time.sleep(0.5)
        raise LabError(f"machine {machine.name} did not answer on 127.0.0.1:{machine.port} within {timeout:.0f}s ({last})")

    def stop(self, machine: Machine, timeout: float = 30.0) -> None:
        """Stop one machine by its recorded PIDs: SIGTERM to the supervisor, which passes it to nspawn (a
        clean poweroff) and exits when nspawn has; SIGKILL to both if they hang. An nspawn whose
        supervisor is gone is stopped the same way, by its own PID."""
        # A machine started before the lab had a supervisor recorded its nspawn's PID itself.
        nspawn = self.nspawn_pid(machine) or (machine.pid if _is_nspawn_of(machine.pid, machine) else 0)
        if self.is_ours(machine):
            os.kill(machine.pid, signal.SIGTERM)
            if not wait_gone(machine.pid, timeout):
                nspawn = self.nspawn_pid(machine) or nspawn
                os.kill(machine.pid, signal.SIGKILL)
                wait_gone(machine.pid, 10.0)
                if nspawn and self.nspawn_pid(machine) == nspawn:
                    os.kill(nspawn, signal.SIGKILL)
                    wait_gone(nspawn, 10.0)
        elif nspawn:
            os.kill(nspawn, signal.SIGTERM)
            if not wait_gone(nspawn, timeout):
                os.kill(nspawn, signal.SIGKILL)
                wait_gone(nspawn, 10.0)
        # The container's processes die with its init; wait for the last of them to be reaped.
        deadline = time.monotonic() + 10.0
        while self.processes_inside(machine) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self.processes_inside(machine)
        if left:
            raise LabError(f"machine {machine.name}: processes {left} still run inside {machine.root}; not removing it")
        for cgroup in filter(None, machine.extra.get("cgroups", "").split(":")):
            remove_cgroup(Path(cgroup))
        if machine.extra.get(REAL_NODE):
            # What a real node leaves on the host (the machine shares its network and v1 cgroup hierarchies).
            cleanup_host(machine)
        shutil.rmtree(machine.directory, ignore_errors=True)

    def up(self, specs: list[MachineSpec], base_port: int, timeout: float = 90.0, compiler_cache: bool = False,
           real_nodes: frozenset[str] = frozenset()) -> dict[str, Machine]:
        """Start the machines asked for; ones already running with the same spec are kept.

        compiler_cache: bind each new machine's distribution's compiler cache (compiler_cache_dir) at
        COMPILER_CACHE_MOUNT. real_nodes: the machines booted to run a kubelet (realnode.nspawn_options); joining
        them is lab/realnode.py's."""
        check_specs(specs)
        machines = self.load()
        wanted = []
        for spec in specs:
            have = machines.get(spec.name)
            if have and self.is_ours(have):
                if (have.distro, have.profile) != (spec.distro, spec.profile):
                    raise LabError(
                        f"machine {spec.name} already runs {have.distro}:{have.profile or '-'}, not {spec.distro}:{spec.profile or '-'}: "
                        "run 'lab down' first"
                    )
                continue
            wanted.append(spec)
        if not wanted:
            return machines
        taken = {m.port for m in machines.values() if self.is_ours(m)}
        ports = assign_ports(wanted, base_port, taken)
        images = ensure_images([get_distro(s.distro) for s in wanted])
        nvml = build_fake_nvml(cache_dir()) if any(s.profile for s in wanted) else None
        self.ensure_key()
        new = {
            s.name: Machine(
                name=s.name,
                distro=s.distro,
                profile=s.profile,
                port=ports[s.name],
                directory=str(self.dir / "machines" / s.name),
                image=str(images[s.distro]),
                extra={**({"compiler_cache": str(compiler_cache_dir(s.distro))} if compiler_cache else {}),
                       **({REAL_NODE: "true"} if s.name in real_nodes else {})},
            )
            for s in wanted
        }
        for m in new.values():
            if "compiler_cache" in m.extra:
                Path(m.extra["compiler_cache"]).mkdir(parents=True, exist_ok=True)
        ensure_inotify_instances()
        try:
            with ThreadPoolExecutor(max_workers=len(new)) as pool:
                list(pool.map(lambda m: self.prepare_root(m, images[m.distro], nvml), new.values()))
            for m in new.values():
                self.boot(m)
                machines[m.name] = m
            self.save(machines)
            with ThreadPoolExecutor(max_workers=len(new)) as pool:
                states = dict(zip(new, pool.map(lambda m: self.wait_ready(m, timeout), new.values()), strict=True))
            for name, state in states.items():
                new[name].extra["systemd"] = state
        except BaseException:
            # Leave nothing half-started behind: stop what this call started.
            for m in new.values():
                self.stop(m)
                machines.pop(m.name, None)
            self.save(machines)
            raise
        self.save(machines)
        return machines

    @property
    def inventory_record(self) -> Path:
        """Where `up` records the inventory file it wrote, so `down` removes that one and no other lab's."""
        return self.dir / "inventory-path"

    def record_inventory(self, path: Path) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.inventory_record.write_text(f"{path.resolve()}\n")

    def recorded_inventory(self) -> Path | None:
        try:
            text = self.inventory_record.read_text().strip()
        except FileNotFoundError:
            return None
        return Path(text) if text else None

    def down(self) -> list[str]:
        """Stop every machine in the state file and remove its directory and the lab's state."""
        machines = self.load()
        stopped = []
        for machine in list(machines.values()):
            self.stop(machine)
            machines.pop(machine.name)
            self.save(machines)
            stopped.append(machine.name)
        shutil.rmtree(self.dir / "machines", ignore_errors=True)
        for path in (self.state_file, self.key, self.key.with_suffix(".pub"), self.inventory_record):
            path.unlink(missing_ok=True)
        if self.dir.is_dir() and not any(self.dir.iterdir()):
            self.dir.rmdir()
        return stopped


def process_start(pid: int) -> int | None:
    """When pid started, in clock ticks after boot (field 22 of /proc/PID/stat); None when no process runs as pid.

    With the PID a process's identity: PIDs come round again (pid_max is 32768 on many hosts, and a CI run starts
    that many processes in minutes), so a PID recorded earlier may name another process now. Whatever stops a
    process by a recorded PID compares this first (`same_process`).
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    if not fields or fields[0] == "Z":
        return None
    return int(fields[19])


def same_process(pid: int, start: int | None) -> bool:
    """Whether pid still runs the process that started at `start` (an unknown start is never the same)."""
    return pid > 0 and start is not None and process_start(pid) == start


def wait_gone(pid: int, timeout: float, start: int | None = None) -> bool:
    """Wait for a child or a foreign process to exit; reap it if it is our child. Given the process's start
    (`process_start`), another process that has taken the PID since counts as gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        if not process_alive(pid) or (start is not None and not same_process(pid, start)):
            return True
        time.sleep(0.1)
    return False


def _cmdline(pid: int) -> list[str]:
    """The argv of a running process ([] if none or unreadable)."""
    if pid <= 0:
        return []
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="surrogateescape").split("\0")[:-1] if raw else []


def _is_nspawn_of(pid: int, machine: Machine) -> bool:
    """Whether pid runs the systemd-nspawn of this machine (argv[0] systemd-nspawn, its root in argv)."""
    argv = _cmdline(pid)
    return bool(argv) and argv[0].endswith("systemd-nspawn") and machine.directory + "/root" in argv


def _tail(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no console log"
    return lines[-1] if lines else NO_CONSOLE_OUTPUT

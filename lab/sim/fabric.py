"""LAB ONLY: a stand-in for Fabric Manager and IMEX on a lab machine, which has no NVSwitch to drive.

The real packages are installed (from the distribution's archive, by the fabric_manager role) and their
own units stay; the lab adds a drop-in to each (DROPINS) that runs this script in place of the daemon.
It does what the lab can check of the real one:
- reads the version of the installed daemon from its package (dpkg: the version of the package that installed the
  binary), else from the real binary (`nv-fabricmanager --version`; IMEX of branch 620 reports its own version there,
  2.0.0, not the driver's), and the loaded driver's from the simulated /proc/driver/nvidia/version;
- on a mismatch, or with no driver loaded, fails as the real daemon does (it aborts: "checks the currently
  loaded kernel driver stack version for compatibility"), writing the reason to its log file and stdout;
- otherwise moves the fake NVML's fabric state (HW_ROOT/nvml/fabric) to completed, logs the real
  daemon's success line, and stays "active" (a oneshot that remains after exit);
- with a planted fault (HW_ROOT/fabric-fault, its text the daemon's error), fails with it and leaves the
  fabric in progress, as a switch that does not train does: for the role's failure path.
It cannot show NVLink routing, NVSwitch errors, the NVLink Subnet Manager or IMEX peers: docs/lab.md.

Run as `python3 /opt/gpuops-lab/fabric.py start|stop fabricmanager|imex`; stdlib only, Python 3.10+.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

HW_ROOT = "/opt/gpuops-lab/hw"
SCRIPT = "/opt/gpuops-lab/fabric.py"
DAEMONS = {
    # name: (unit, binary, its config file, its default log file)
    "fabricmanager": ("nvidia-fabricmanager.service", "/usr/bin/nv-fabricmanager",
                      "/usr/share/nvidia/nvswitch/fabricmanager.cfg", "/var/log/fabricmanager.log"),
    "imex": ("nvidia-imex.service", "/usr/bin/nvidia-imex", "/etc/nvidia-imex/config.cfg", "/var/log/nvidia-imex.log"),
}
DROPIN_NAME = "gpuops-lab.conf"
FAULT_NAME = "fabric-fault"


def dropin(name: str) -> str:
    """The drop-in that runs the stand-in in place of the daemon (the package's unit is left as it is)."""
    return f"""# LAB ONLY (gpuops lab): no NVSwitch exists here; {SCRIPT} stands in for the daemon.
[Service]
Type=oneshot
RemainAfterExit=yes
PIDFile=
ExecStartPre=
ExecStart=
ExecStart=/usr/bin/python3 {SCRIPT} start {name}
ExecStop=
ExecStop=/usr/bin/python3 {SCRIPT} stop {name}
"""


DROPINS = {DAEMONS[name][0]: dropin(name) for name in DAEMONS}
_VERSION = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


def loaded_driver(hw: str) -> str | None:
    """The loaded driver's version from the simulated /proc/driver/nvidia/version; None when none is loaded."""
    try:
        with open(os.path.join(hw, "proc/driver/nvidia/version")) as handle:
            first = handle.readline()
    except OSError:
        return None
    found = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", first)
    return found.group(1) if found else None


def package_version(path: str) -> str | None:
    """The upstream version of the package that installed `path` (620.70.06 of 620.70.06-0ubuntu0.24.04.1); None where
    dpkg does not know the file."""
    try:
        owner = subprocess.run(["dpkg-query", "-S", path], capture_output=True, text=True, timeout=30, check=False)
        if owner.returncode != 0 or ": " not in owner.stdout:
            return None
        package = owner.stdout.splitlines()[0].rsplit(": ", 1)[0]
        version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                                 timeout=30, check=False).stdout
    except OSError:
        return None
    found = re.match(r"(?:\d+:)?(\d+\.\d+(?:\.\d+)?)", version.strip())
    return found.group(1) if found else None


def daemon_version(binary: str) -> str | None:
    """The installed daemon's version: its package's, else what the binary reports ('Fabric Manager version is :
    580.178.04')."""
    from_package = package_version(binary)
    if from_package:
        return from_package
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except OSError:
        return None
    found = _VERSION.search(out)
    return found.group(1) if found else None


def config_value(path: str, key: str) -> str | None:
    try:
        with open(path) as handle:
            for line in handle:
                name, sep, value = line.strip().partition("=")
                if sep and name.strip() == key:
                    return value.strip()
    except OSError:
        pass
    return None


def log(path: str, level: str, message: str) -> None:
    print(f"[{level}] {message}")
    try:
        with open(path, "a") as handle:
            handle.write(f"[{level}] [gpuops lab stand-in] {message}\n")
    except OSError:
        pass


def set_fabric(hw: str, text: str) -> None:
    path = os.path.join(hw, "nvml/fabric")
    if not os.path.isdir(os.path.dirname(path)):
        return
    with open(path + ".tmp", "w") as handle:
        handle.write(text + "\n")
    os.replace(path + ".tmp", path)


def start(name: str, hw: str = HW_ROOT) -> int:
    _unit, binary, config, default_log = DAEMONS[name]
    logfile = config_value(config, "LOG_FILE_NAME") or default_log
    mine = daemon_version(binary)
    if mine is None:
        log(logfile, "ERROR", f"cannot read the version of {binary}")
        return 1
    driver = loaded_driver(hw)
    if driver is None:
        log(logfile, "ERROR", "failed to open the NVIDIA GPU driver: the driver is not loaded")
        return 1
    if driver != mine:
        log(logfile, "ERROR", f"{name} version {mine} does not match the loaded NVIDIA driver version {driver}; "
                              "install the matching package")
        return 1
    fault = os.path.join(hw, FAULT_NAME)
    if name == "fabricmanager" and os.path.isfile(fault):
        set_fabric(hw, "in_progress")
        with open(fault) as handle:
            log(logfile, "ERROR", handle.read().strip())
        return 1
    if name == "fabricmanager":
        set_fabric(hw, "completed 0")
        log(logfile, "INFO", "Successfully configured all the available NVSwitches to route GPU NVLink traffic.")
    else:
        log(logfile, "INFO", f"IMEX {mine} started")
    return 0


def main(argv: list) -> int:
    if len(argv) < 3 or argv[1] not in ("start", "stop") or argv[2] not in DAEMONS:
        print(f"usage: {argv[0]} start|stop {'|'.join(DAEMONS)}", file=sys.stderr)
        return 2
    if argv[1] == "stop":
        return 0
    return start(argv[2], argv[3] if len(argv) > 3 else HW_ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

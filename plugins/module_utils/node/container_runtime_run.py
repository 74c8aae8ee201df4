# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container_runtime module's check: the runtime found and its settings checked against the node, writing nothing
(validate_only) but the files given (node_files), which are put in place once the settings pass.

Shared by the container_runtime module and by gpu_info, which answers the container_toolkit role's check in the node's
one read (module_utils/node/answers.py).
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import NotTextError, read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import answers
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import container_runtime as cr
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import node_files as nf
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import CONTAINER_RUNTIMES, IMAGE_BUILD_ARG, image_build_setting
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.host import Host, installed_versions

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "runtime": {"type": "str", "choices": ["auto", "containerd", "crio"], "default": "auto"},
    "config": {"type": "path"},
    "drop_in": {"type": "str"},
    "runtime_name": {"type": "str", "default": "nvidia"},
    "runtime_path": {"type": "path", "default": "/usr/bin/nvidia-container-runtime"},
    "set_as_default": {"type": "raw", "default": "keep"},
    "cdi": {"type": "str", "choices": list(cr.CDI_CHOICES), "default": "auto"},
    "cdi_spec_dirs": {"type": "list", "elements": "path"},
    "runtime_config": {"type": "dict", "default": {}},
    "containerd_version": {"type": "str"},
    "toolkit_config": {"type": "path", "default": "/etc/nvidia-container-runtime/config.toml"},
    # No choices here: null is "leave the mode" (NRI mode passes it), which a choices check refuses; plan_toolkit checks
    # the value against TOOLKIT_MODES and names the role's variable.
    "toolkit_mode": {"type": "str"},
    "toolkit_settings": {"type": "dict", "default": {}},
    "nri": {"type": "bool", "default": False},
    "backup": {"type": "bool", "default": True},
    "backup_dir": {"type": "path"},
    "image_build": IMAGE_BUILD_ARG,
    "restart_marker": {"type": "path"},
    "variables": {"type": "dict", "default": {}},
    "validate_only": {"type": "bool", "default": False},
    "packages": {"type": "list", "elements": "str", "default": []},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "record": {"type": "path", "default": "/etc/gpuops-nvidia/container-runtime.json"},
    "cdi_spec": {"type": "dict"},
    "cdi_refresh": {"type": "dict"},
    **nf.ARGUMENT_SPEC,
}

DEFAULTS = {
    "containerd": ("/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"),
    "crio": ("/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-nvidia.toml"),
}


UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
UNITS = {"containerd": "containerd.service", "crio": "crio.service"}
MARKER_DIR = "/run/gpuops"


def unit_started_usec(module: AnsibleModule, unit: str) -> int | None:
    """When the unit last became active, in CLOCK_MONOTONIC microseconds (systemd's own clock); None if unknown."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return None
    rc, out, _err = module.run_command([systemctl, "show", "--property=ActiveEnterTimestampMonotonic", "--value", unit],
                                       environ_update={"LC_ALL": "C"})
    try:
        return int(out.strip()) if rc == 0 else None
    except ValueError:
        return None


def pending_restart(module: AnsibleModule, marker: str, unit: str, read_only: bool = False) -> bool:
    """Whether the marker says a config change still waits for the runtime's restart. A marker last written
    before the unit's last start is stale: removed (outside check mode and read_only) and not pending."""
    try:
        written = os.stat(marker).st_mtime
    except FileNotFoundError:
        return False
    started = unit_started_usec(module, unit)
    # systemd's monotonic start time, as wall-clock time (the marker's mtime) by way of the clocks' offset now.
    if started and time.time() - (time.monotonic() - started / 1_000_000) > written:
        if not (module.check_mode or read_only):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker)
        return False
    return True


def run(module: AnsibleModule, argv: list[str]) -> str:
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"{' '.join(argv)} failed: {err.strip() or out.strip()}", rc=rc, stdout=out, stderr=err, cmd=argv)
    return out


def crio_sources(config: str, drop_in: str) -> list[tuple[str, str]]:
    """CRI-O's config files in the order it reads them, without our drop-in. CRI-O reads every file of its
    drop-in directory, whatever the name (seen with CRI-O 1.34: it loaded an editor's backup file)."""
    sources = []
    text = read_text(config)
    if text is not None:
        sources.append((config, text))
    directory = os.path.dirname(drop_in)
    if os.path.isdir(directory):
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if path != drop_in and os.path.isfile(path):
                sources.append((path, read_text(path) or ""))
    return sources


# containerd 2.x reads this directory's files whatever the main config imports (its default imports).
DEFAULT_IMPORTS_2X = "/etc/containerd/conf.d/*.toml"


def containerd_imports(main_path: str, main_text: str | None, version: tuple[int, int, int]) -> list[tuple[str, str | None]]:
    """The files containerd reads after the main one, in its order: each import (relative to the main file's
    directory; a glob as its sorted matches), with containerd 2.x's default import first; (path, text or None)."""
    try:
        listed = cr.read(main_text, main_path).get("imports") or []
    except cr.ConfigError:
        return []  # the plan reports the file itself
    patterns = ([DEFAULT_IMPORTS_2X] if version >= (2, 0, 0) else []) + [str(p) for p in listed if isinstance(p, str)]
    out: list[tuple[str, str | None]] = []
    seen = {main_path}
    for pattern in patterns:
        pattern = pattern if os.path.isabs(pattern) else os.path.join(os.path.dirname(main_path), pattern)
        paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for path in paths:
            if path in seen or os.path.isdir(path):
                continue
            seen.add(path)
            out.append((path, read_text(path)))
    return out


def plan_present(module: AnsibleModule, runtime: str, config: str, drop_in: str, version: tuple[int, int, int],
                 result: dict) -> tuple[dict, dict]:
    """The change state=present makes: the runtime's plan and the toolkit config's; fails the module on a config it
    cannot read or use. Reads files and may run `containerd config default`; writes nothing."""
    p = module.params
    names = p["variables"]
    try:
        if runtime == "containerd":
            binary = module.get_bin_path("containerd")
            main_text = read_text(config)
            plan = cr.plan_containerd(
                version=version, main_path=config, main_text=main_text, imports=containerd_imports(config, main_text, version),
                defaults=(lambda: run(module, [binary, "config", "default"])) if binary else None,
                drop_in_path=drop_in, drop_in_text=read_text(drop_in) if drop_in else None,
                name=p["runtime_name"], runtime_path=p["runtime_path"], set_as_default=p["set_as_default"],
                cdi=p["cdi"], cdi_spec_dirs=p["cdi_spec_dirs"], runtime_config=p["runtime_config"], nri=p["nri"])
            result["config_version"] = plan["config_version"]
        else:
            if p["cdi"] == "skip":
                module.warn("cdi: skip has no effect on CRI-O, whose CDI support is always on")
            plan = cr.plan_crio(
                sources=crio_sources(config, drop_in), drop_in_path=drop_in, drop_in_text=read_text(drop_in),
                name=p["runtime_name"], runtime_path=p["runtime_path"], set_as_default=p["set_as_default"],
                cdi_spec_dirs=p["cdi_spec_dirs"], runtime_config=p["runtime_config"], nri=p["nri"])
        toolkit = cr.plan_toolkit(path=p["toolkit_config"], text=read_text(p["toolkit_config"]),
                                  mode=p["toolkit_mode"], settings=p["toolkit_settings"])
    except cr.ConfigError as exc:
        module.fail_json(msg=exc.named(names), **result)
    except NotTextError as exc:
        module.fail_json(msg=str(exc), **result)
    except OSError as exc:
        module.fail_json(msg=f"cannot read the runtime's config: {exc}", **result)
    return plan, toolkit


def restart_marker(module: AnsibleModule, runtime: str, image_build: bool) -> str:
    """The restart marker in use: none in an image build, else the option's (empty: off) or the runtime's default."""
    p = module.params
    if image_build:
        return ""
    return p["restart_marker"] if p["restart_marker"] is not None else os.path.join(MARKER_DIR, f"{runtime}.restart-pending")


def begin(module: AnsibleModule, host: Host | None = None) -> tuple[dict[str, Any], str, str, str, tuple[int, int, int], list[str]]:
    """What every state starts from: the result's common part (the packages' versions through `host` where given), the
    runtime, its config and drop-in, containerd's version and the inputs' warnings; fails the module on settings the
    runtime cannot take."""
    p = module.params
    host = host or Host(module.run_command, module.get_bin_path)
    result: dict[str, Any] = {
        "runtime": p["runtime"], "runtime_handler": p["runtime_name"], "runtime_version": "", "config_version": 0,
        "packages": installed_versions(host, module.get_bin_path, p["packages"]),
        "image_build": image_build_setting(p["image_build"]),
        "cdi_refresh_unit": any(os.path.exists(os.path.join(d, "nvidia-cdi-refresh.path")) for d in UNIT_DIRS)}
    runtime, config, drop_in, version, warnings = "", "", "", (0, 0, 0), []
    try:
        installed = [name for name in CONTAINER_RUNTIMES if module.get_bin_path(name)]
        if p["containerd_version"] and "containerd" not in installed:
            installed.append("containerd")  # an image built elsewhere: the version says it will be there
        if p["state"] == "absent" and p["runtime"] == "auto" and not installed:
            # An uninstall on a node without containerd or CRI-O: no runtime config holds anything of ours to take out.
            module.exit_json(changed=False, rollback=[], restart_required=False,
                             msg="no container runtime (containerd, crio) on this node: nothing to take out of its config",
                             **{**result, "runtime": "none"})
        runtime = result["runtime"] = cr.detect_runtime(p["runtime"], installed)
        config = p["config"] or DEFAULTS[runtime][0]
        drop_in = DEFAULTS[runtime][1] if p["drop_in"] is None else p["drop_in"]
        if drop_in and os.path.isdir(drop_in):
            raise cr.ConfigError(f"{drop_in!r} is a directory; give the path of a .toml file in it", "drop_in")
        if runtime == "containerd":
            if p["containerd_version"]:
                version = cr.containerd_version("containerd " + p["containerd_version"])
            else:
                version = cr.containerd_version(run(module, [module.get_bin_path("containerd", required=True), "--version"]))
            result["runtime_version"] = ".".join(map(str, version))
            warnings = cr.check_containerd_inputs(
                version=version, drop_in_path=drop_in, name=p["runtime_name"], runtime_path=p["runtime_path"],
                set_as_default=p["set_as_default"], cdi=p["cdi"], cdi_spec_dirs=p["cdi_spec_dirs"],
                runtime_config=p["runtime_config"], nri=p["nri"])
        else:
            if not drop_in:
                raise cr.ConfigError("CRI-O is configured through a drop-in file; an empty drop_in is only for containerd", "drop_in")
            warnings = cr.check_crio_inputs(drop_in_path=drop_in, name=p["runtime_name"], runtime_path=p["runtime_path"],
                                            set_as_default=p["set_as_default"], cdi_spec_dirs=p["cdi_spec_dirs"])
            if p["nri"]:
                crio_found = cr.crio_version(run(module, [module.get_bin_path("crio", required=True), "--version"]))
                result["runtime_version"] = ".".join(map(str, crio_found))
                warnings += cr.check_nri_support("crio", crio_found, p["cdi"])
    except cr.ConfigError as exc:
        module.fail_json(msg=exc.named(p["variables"]), **result)
    return result, runtime, config, drop_in, version, warnings


def validate(module: AnsibleModule, host: Host | None = None) -> dict[str, Any]:
    """validate_only's result: the settings checked against the node and the change state=present would make planned
    (`up_to_date`), writing nothing; the files given put in place (outside check mode) once the settings pass; where
    nothing is to change before it, the CDI spec's check too. Its warnings through module.warn."""
    p = module.params
    result, runtime, config, drop_in, version, warnings = begin(module, host)
    for warning in warnings:
        module.warn(warning)
    check: dict[str, Any] = {
        "changed": False, "files": [], "restart_required": False, "restart_pending": False, "restart_marker": "",
        "rollback": [], "cdi_enabled": False, "cdi_supported": runtime == "crio" or version >= cr.CDI_MIN, "up_to_date": None}
    if p["state"] == "present" and cr.HAS_TOMLKIT:
        plan, toolkit = plan_present(module, runtime, config, drop_in, version, result)
        marker = restart_marker(module, runtime, result["image_build"])
        pending = bool(marker) and pending_restart(module, marker, UNITS[runtime], read_only=True)
        files = {**plan["files"], **toolkit["files"]}
        # Any marker an earlier run left, pending or made stale by the runtime's restart, is the real run's to remove.
        marker_left = bool(marker) and os.path.exists(marker)
        check.update(files=sorted(files), restart_pending=pending, restart_marker=marker, cdi_enabled=plan["cdi_enabled"],
                     cdi_supported=plan["cdi_supported"], up_to_date=not files and not marker_left)
        # The run that changes something warns again; one the caller leaves out would not.
        if check["up_to_date"]:
            for warning in plan["warnings"]:
                module.warn(warning)
    if p["files"] or p["units"]:
        tracker = ChangeTracker(module._diff, always_list=True)
        done = nf.ensure(module, tracker, image_build=result["image_build"])
        check.update(node_files=done, changed=done["changed"])
        tracker.update(check)
    # Where nothing is to change before it (the settings in place, the packages and repository there), the CDI spec's
    # check too (with GPUs, as the role makes the spec only then), for the container_toolkit role to take instead of its
    # own round trip; where no spec is made here (no CDI in the runtime, no GPUs, none asked for), the check of the
    # refresh units the role keeps then, where the toolkit has them.
    if check["up_to_date"] and not result["image_build"] and not check["changed"] \
            and all(v is not None for v in result["packages"].values()):
        if p["cdi_spec"] is not None and check["cdi_enabled"] and answers.gpus_seen(p["cdi_spec"].get("gpu_info")):
            check["cdi_spec"] = answers.cdi_spec(module, p["cdi_spec"], result["cdi_refresh_unit"])
        elif p["cdi_refresh"] is not None and result["cdi_refresh_unit"]:
            check["cdi_refresh"] = answers.cdi_refresh(module, p["cdi_refresh"])
    return {**check, **result}

# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cdi_spec module's work: the CDI spec generated with nvidia-ctk, checked and put in place.

Shared by the cdi_spec module and by container_runtime, which answers the container_toolkit role's CDI spec in the
round trip of its settings' check (module_utils/node/answers.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import FileResult, read_text, remove_file, write_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import cdi
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import node_files as nf
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import IMAGE_BUILD_ARG, image_build_setting

try:
    import yaml

    HAS_YAML = True
    PARSE_ERRORS: tuple = (ValueError, yaml.YAMLError)
except ImportError:  # pragma: no cover - reported through missing_required_lib
    HAS_YAML = False
    PARSE_ERRORS = (ValueError,)


SPEC_MODE = 0o644


def load(text: str, fmt: str) -> Any:
    return json.loads(text) if fmt == "json" else yaml.safe_load(text)


def finish(result: dict, tracker: ChangeTracker, done: FileResult) -> dict:
    """The result with the file's change (and its diff, in diff mode) and backup."""
    result["changed"] = tracker.add_file(done)
    if done.backup:
        result["backup_file"] = done.backup
    return tracker.update(result)


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "path": {"type": "path", "default": "/var/run/cdi/nvidia.yaml"},
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "nvidia_ctk": {"type": "path"},
    "driver_root": {"type": "path"},
    "dev_root": {"type": "path"},
    "device_name_strategy": {"type": "list", "elements": "str", "choices": list(cdi.NAME_STRATEGIES),
                             "default": ["index", "uuid"]},
    "kind": {"type": "str", "default": "nvidia.com/gpu"},
    "gpu_info": {"type": "dict"},
    "backup": {"type": "bool", "default": False},
    **nf.ARGUMENT_SPEC,
    "image_build": IMAGE_BUILD_ARG,
}


def spec_result(module: AnsibleModule, diff: bool) -> dict:
    """The cdi_spec module's result for the module's parameters (ARGUMENT_SPEC): the spec generated, checked and put in
    place (in check mode, what would change), then the files and units; a failure is the module's fail_json."""
    p = module.params
    path = p["path"]
    ext = os.path.splitext(path)[1]
    if ext not in (".json", ".yaml", ".yml"):
        module.fail_json(msg=f"path: {path!r} must end in .json, .yaml or .yml (the CDI loaders read only those)")
    fmt = "json" if ext == ".json" else "yaml"
    if fmt == "yaml" and not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML (python3-yaml)"))
    if not cdi.KIND.match(p["kind"]):
        module.fail_json(msg=f"kind: {p['kind']!r} is not <vendor>/<class>, e.g. nvidia.com/gpu")
    result: dict = {"changed": False, "path": path}
    tracker = ChangeTracker(diff)
    if p["state"] == "absent":
        try:
            done = remove_file(module, path, backup=p["backup"])
        except OSError as exc:
            module.fail_json(msg=f"removing the CDI spec failed: {exc}", **result)
        finish(result, tracker, done)
    else:
        generate(module, tracker, result)
    if p["files"] or p["units"]:
        result["node_files"] = nf.ensure(module, tracker, image_build=image_build_setting(p["image_build"]))
        result["changed"] = result["changed"] or result["node_files"]["changed"]
    return tracker.update(result)


def generate(module: AnsibleModule, tracker: ChangeTracker, result: dict) -> None:
    """The spec generated, checked and put in place where it differs; its devices, version and kind into `result`."""
    p = module.params
    path = p["path"]
    ext = os.path.splitext(path)[1]
    fmt = "json" if ext == ".json" else "yaml"
    try:
        old_text = read_text(path, errors="replace")
    except OSError as exc:
        module.fail_json(msg=f"reading the CDI spec in place failed: {exc}", **result)

    ctk = p["nvidia_ctk"] or module.get_bin_path("nvidia-ctk", required=True)
    directory = os.path.dirname(path)
    parent = os.path.dirname(directory.rstrip("/")) or "/"
    # Generate beside the spec directory (same file system, so the move is atomic) but not in it, where a
    # runtime watching the directory could read a half-written or duplicate spec.
    work = tempfile.mkdtemp(prefix=".gpuops-cdi-", dir=parent if os.path.isdir(parent) else None)
    try:
        tmp = os.path.join(work, "nvidia" + ext)
        vendor, cls = p["kind"].split("/", 1)
        argv = [ctk, "cdi", "generate", f"--output={tmp}", f"--format={fmt}", f"--vendor={vendor}", f"--class={cls}"]
        argv += [f"--device-name-strategy={s}" for s in p["device_name_strategy"]]
        if p["driver_root"]:
            argv.append(f"--driver-root={p['driver_root']}")
        if p["dev_root"] or p["driver_root"]:
            argv.append(f"--dev-root={p['dev_root'] or p['driver_root']}")
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0 or not os.path.exists(tmp):
            errors = [line for line in err.splitlines() if "level=error" in line] or err.strip().splitlines()[-3:]
            module.fail_json(msg=f"nvidia-ctk cdi generate failed: {' | '.join(errors)}", rc=rc, stdout=out, stderr=err, cmd=argv)
        with open(tmp, encoding="utf-8") as fh:
            new_text = fh.read()
        spec = load(new_text, fmt)
        problems = cdi.validate(spec)
        if problems:
            module.fail_json(msg=f"nvidia-ctk generated a CDI spec that is not valid: {'; '.join(problems)}", spec=spec)
        names = cdi.device_names(spec)
        if spec.get("kind") != p["kind"]:
            module.fail_json(msg=f"the generated spec's kind is {spec.get('kind')!r}, not {p['kind']!r}")
        if p["gpu_info"] is not None:
            missing = [n for n in cdi.expected_names(p["gpu_info"], p["device_name_strategy"]) if n not in names]
            if missing:
                module.fail_json(msg=f"the generated CDI spec has no device for {', '.join(missing)}, which gpu_info "
                                     f"found on this node; it has {', '.join(names)}", devices=names)
        try:
            old = load(old_text, fmt) if old_text is not None else None
        except PARSE_ERRORS:
            old = None
        result.update(devices=names, cdi_version=spec.get("cdiVersion"), kind=spec.get("kind"))
        if not cdi.same_spec(old, spec):
            # The temporary file goes in the work directory, not in the one the runtimes watch. The spec is
            # always 0644, whatever the one it replaces had: it is the toolkit's generated file, rewritten by
            # its nvidia-cdi-refresh units too.
            try:
                done = write_text(module, path, new_text, mode=SPEC_MODE, backup=p["backup"], temp_dir=work)
            except OSError as exc:
                module.fail_json(msg=f"writing the CDI spec failed: {exc}", **result)
            finish(result, tracker, done)
    finally:
        shutil.rmtree(work, ignore_errors=True)

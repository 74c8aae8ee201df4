#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cdi_spec
short_description: Generate, check and install the NVIDIA CDI spec with nvidia-ctk
version_added: 0.1.0
description:
  - Runs the toolkit's C(nvidia-ctk cdi generate) into a temporary file, checks the result against the CDI
    schema's rules (version, C(vendor/class) kind, at least one device, unique names, container edits that are
    not empty, absolute paths, known hook names, no unknown fields) and, given O(gpu_info), that every GPU and
    MIG device it read has its device name, then puts it in place atomically.
  - Idempotent - the spec is compared as data with the one in place, so a different header, key order or
    formatting is no change.
  - Returns the device names, for C(nvidia.com/gpu=<name>) references.
  - The toolkit's C(nvidia-cdi-refresh) units (toolkit 1.18 and later) regenerate C(/var/run/cdi/nvidia.yaml) when
    the driver changes; this module writes the same file by default, so the two never disagree on where it is.
  - After the spec, it puts O(files) and O(units) in place as M(gpuops.nvidia.node_files) does (the refresh units'
    drop-ins, say), in the same run.
requirements:
  - the NVIDIA Container Toolkit (C(nvidia-ctk)) and a loaded driver on the managed node
  - PyYAML (python3-yaml) for a C(.yaml) spec
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  path:
    description: The spec file; its extension (C(.yaml), C(.yml) or C(.json)) sets the format.
    type: path
    default: /var/run/cdi/nvidia.yaml
  state:
    description: C(present) generates the spec; C(absent) removes the file.
    type: str
    choices: [present, absent]
    default: present
  nvidia_ctk:
    description: The nvidia-ctk executable; found in C(PATH) when not given.
    type: path
  driver_root:
    description: Root of the driver's files (C(/run/nvidia/driver) for a driver in a container); C(/) by default.
    type: path
  dev_root:
    description: Root of the driver's device nodes; defaults to O(driver_root).
    type: path
  device_name_strategy:
    description: How devices are named (nvidia-ctk's default is C(index) and C(uuid)).
    type: list
    elements: str
    choices: [index, uuid, type-index]
    default: [index, uuid]
  kind:
    description: The spec's kind, C(<vendor>/<class>).
    type: str
    default: nvidia.com/gpu
  gpu_info:
    description:
      - What M(gpuops.nvidia.gpu_info) read on this node (C(gpuops_gpu_info)); every GPU and MIG device in it must
        have its name in the spec, or nothing is written and the module fails naming the missing ones.
    type: dict
  backup:
    description:
      - Keep a copy of the spec in place before it is replaced or removed, beside it, named
        C(<file>.<pid>.<date>@<time>~) (the CDI loaders read only C(.json), C(.yaml) and C(.yml) files, so the
        copy is not read as a spec).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.node_files
  - gpuops.nvidia.node_files.image_build
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - The spec is still generated, into a temporary directory that is removed, so the reported change is real;
        nothing is put in place and, with O(state=absent), nothing is removed.
  diff_mode:
    support: full
    details:
      - The spec file's text before and after.
  idempotent:
    support: full
    details:
      - The generated spec is compared as data with the one in place, so a second run changes nothing unless
        C(nvidia-ctk) now generates different devices (the driver, the GPUs or their MIG devices changed in between).
notes:
  - Supports check mode and diff. In check mode the spec is still generated (into a temporary directory that is
    removed) so the diff is real; nothing is put in place.
seealso:
  - module: gpuops.nvidia.container_runtime
"""

EXAMPLES = r"""
- name: Generate the CDI spec for the GPUs gpu_info found
  gpuops.nvidia.cdi_spec:
    gpu_info: "{{ gpuops_gpu_info }}"
  register: cdi

- name: A driver in a container
  gpuops.nvidia.cdi_spec:
    driver_root: /run/nvidia/driver
"""

RETURN = r"""
path:
  description: The spec file.
  returned: always
  type: str
  sample: /var/run/cdi/nvidia.yaml
devices:
  description: The device names in the spec.
  returned: when state is present
  type: list
  elements: str
  sample: ["0", "1", "GPU-8f6f1d9e-...", "all"]
cdi_version:
  description: The spec's cdiVersion.
  returned: when state is present
  type: str
  sample: 0.5.0
kind:
  description: The spec's kind.
  returned: when state is present
  type: str
  sample: nvidia.com/gpu
node_files:
  description:
    - What O(files) and O(units) did (or would do, in check mode), as M(gpuops.nvidia.node_files) returns it (C(changed),
      C(files), C(units), C(daemon_reloaded), C(changed_paths)).
  returned: when O(files) or O(units) are given
  type: dict
  sample: {"changed": false, "files": [], "units": [{"name": "nvidia-cdi-refresh.path", "actions": []}], "daemon_reloaded": false,
           "changed_paths": []}
backup_file:
  description: The copy of the spec made before it was replaced or removed.
  returned: when O(backup=true) and the spec was replaced or removed
  type: str
  sample: /var/run/cdi/nvidia.yaml.2041.2026-11-21@10:00:00~
"""

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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
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
        },
        supports_check_mode=True,
    )
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
    tracker = ChangeTracker(module._diff)
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
    module.exit_json(**tracker.update(result))


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


if __name__ == "__main__":
    main()

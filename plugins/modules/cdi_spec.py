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
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import cdi

try:
    import yaml

    HAS_YAML = True
    PARSE_ERRORS: tuple = (ValueError, yaml.YAMLError)
except ImportError:  # pragma: no cover - reported through missing_required_lib
    HAS_YAML = False
    PARSE_ERRORS = (ValueError,)


def load(text: str, fmt: str):
    return json.loads(text) if fmt == "json" else yaml.safe_load(text)


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
    old_text = None
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            old_text = fh.read()
    result = {"changed": False, "path": path}
    if p["state"] == "absent":
        if old_text is not None:
            result["changed"] = True
            if not module.check_mode:
                os.unlink(path)
        result["diff"] = {"before": old_text or "", "after": ""}
        module.exit_json(**result)

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
            result["changed"] = True
            result["diff"] = {"before_header": path, "after_header": path, "before": old_text or "", "after": new_text}
            if not module.check_mode:
                os.makedirs(directory, mode=0o755, exist_ok=True)
                os.chmod(tmp, 0o644)
                module.atomic_move(tmp, path, unsafe_writes=False)
                os.chmod(path, 0o644)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

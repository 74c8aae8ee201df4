#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: packages_purge
short_description: Purge the packages the collection's installs recorded, and nothing else
version_added: 0.2.0
description:
  - Reads the records the roles keep of what their installs added (one package per line; node_common's
    C(record_planned) and C(record_packages)), and purges the recorded packages dpkg still has, held ones included, in
    one apt transaction.
  - The purge is simulated first (C(apt-get -s purge)). Purging a package also removes every package that depends on
    it, and one of those may not be recorded (the NVML binding the preflight installed pulls in C(libnvidia-ml1), on
    which a driver kept on the node depends). Then each recorded package is tried alone, and one whose removal would
    take (or install) a package that is not recorded stays, named in RV(kept) and in a warning with what needs it.
  - A record is removed once nothing in it is left to purge; one with packages that stayed keeps exactly those, so a
    later run (after the driver went too) purges them.
  - Debian and Ubuntu (apt). Check mode and diff show what would go.
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  records:
    description: The records to read, together (a package may be recorded by more than one role). Missing ones are none.
    type: list
    elements: path
    required: true
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - Simulates the purge and reports what would go and what would stay; purges nothing and keeps the records.
  diff_mode:
    support: full
    details:
      - The packages that go, and each record's text before and after.
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Purge what the driver and Fabric Manager installs added
  gpuops.nvidia.packages_purge:
    records:
      - /etc/gpuops-nvidia/driver-packages
      - /etc/gpuops-nvidia/fabric-manager-packages
"""

RETURN = r"""
purged:
  description: The packages purged (or that would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [nvidia-dkms-580-server-open, dkms, gcc]
kept:
  description: Recorded packages that stay, each with the packages that are not recorded and need it.
  returned: always
  type: dict
  sample: {libnvidia-ml1: [nvidia-driver-bin, nvidia-kernel-dkms]}
records:
  description: Each record read, and what became of it (C(removed), C(kept) with the packages left in it, or C(absent)).
  returned: always
  type: dict
  sample: {/etc/gpuops-nvidia/preflight-packages: removed}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import read_text, remove_file, write_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import packages as pk

_ENV = {"LC_ALL": "C", "LANG": "C", "DEBIAN_FRONTEND": "noninteractive"}
# --ignore-hold: the driver and Fabric Manager hold their packages, and apt's resolver will not remove a held one.
# The simulation shows that nothing but recorded packages goes, so no hold of anyone else's is touched.
_PURGE = ["purge", "-q", "--ignore-hold", "-o", "DPkg::Lock::Timeout=300"]


def main() -> None:
    module = AnsibleModule(argument_spec={"records": {"type": "list", "elements": "path", "required": True}},
                           supports_check_mode=True)
    apt_get = module.get_bin_path("apt-get", required=True)
    tracker = ChangeTracker(module._diff)
    texts = {path: read_text(path, errors="replace") for path in module.params["records"]}
    recorded = pk.read_record("\n".join(t for t in texts.values() if t))
    result: dict = {"purged": [], "kept": {}, "records": {}}

    def simulate(names: list[str]) -> pk.Simulation:
        rc, out, err = module.run_command([apt_get, "-s", *_PURGE, *names], environ_update=_ENV)
        if rc != 0:
            lines = [ln for ln in (err or out).splitlines() if ln.strip()]
            return pk.Simulation(error=lines[-1].strip() if lines else f"rc {rc}")
        return pk.parse_simulation(out)

    plan = pk.Plan()
    if recorded:
        dpkg_query = module.get_bin_path("dpkg-query", required=True)
        _rc, out, _err = module.run_command([dpkg_query, "-W", "-f", "${Package} ${db:Status-Abbrev}\n", *recorded],
                                            environ_update=_ENV)
        try:
            plan = pk.plan_purge(recorded, pk.present(out), simulate)
        except pk.PlanError as exc:
            module.fail_json(msg=str(exc), **result)
    result.update(purged=plan.purge, kept=plan.kept)
    if plan.purge:
        tracker.add("packages", "".join(f"{n}\n" for n in plan.purge), "")
        if not module.check_mode:
            rc, out, err = module.run_command([apt_get, "-y", "--allow-change-held-packages", *_PURGE, *plan.purge],
                                              environ_update=_ENV)
            if rc != 0:
                module.fail_json(msg=f"apt-get purge failed (rc {rc}): {(err or out).strip()[-2000:]}", cmd=[apt_get, *_PURGE, *plan.purge],
                                 rc=rc, stdout=out, stderr=err, **result)
    for name, needed_by in plan.kept.items():
        module.warn(f"{name} stays: not recorded packages need it ({', '.join(needed_by)})")

    for path, text in texts.items():
        if text is None:
            result["records"][path] = "absent"
            continue
        left = [n for n in pk.read_record(text) if n in plan.kept]
        if left:
            tracker.add_file(write_text(module, path, "".join(f"{n}\n" for n in left)))
            result["records"][path] = {"kept": left}
        else:
            tracker.add_file(remove_file(module, path))
            result["records"][path] = "removed"
    result["changed"] = tracker.changed
    module.exit_json(**tracker.update(result))


if __name__ == "__main__":
    main()

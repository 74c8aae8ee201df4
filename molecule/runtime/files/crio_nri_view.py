"""CRI-O's effective NRI settings and runtimes, from `crio config` on stdin, as JSON.

`crio config` prints the merged config of crio.conf and crio.conf.d, each value that equals CRI-O's default commented
out ("# enable_nri = true"): such a line is read as its value where the section has no uncommented one.
"""

import json
import re
import sys
import tomllib

text = sys.stdin.read()
config = tomllib.loads(text).get("crio", {})
nri = dict(config.get("nri", {}))
section = re.search(r"^\[crio\.nri\]\n(.*?)(?=^\[)", text + "\n[end]", re.S | re.M)
for line in (section.group(1) if section else "").splitlines():
    commented = re.match(r"^#\s*(enable_nri|nri_listen)\s*=\s*(.+)$", line)
    if commented and commented.group(1) not in nri:
        nri.update(tomllib.loads(f"{commented.group(1)} = {commented.group(2)}"))
runtime = config.get("runtime", {})
print(json.dumps({"enable_nri": nri.get("enable_nri"), "nri_listen": nri.get("nri_listen"),
                  "runtimes": sorted(runtime.get("runtimes", {})), "default_runtime": runtime.get("default_runtime")}))

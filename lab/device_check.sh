#!/bin/sh
# The checks a session runs on the device machine it is sometimes lent (one real GPU, no network, no systemd as PID 1;
# docs/development.md, "Readings from a real GPU"), as one command from the repository root there:
#   sh lab/device_check.sh
# with the wheels of ansible-core and resolvelib carried in .whl (the machine has Python 3.12 with Jinja2, PyYAML and
# packaging, but no Ansible). What it writes under $OUT comes back: the GPU as nvidia-smi and gpu_info read it, gpu_info's
# read timed, the preflight's report, node.yml in check mode (for the running kernel: the machine has none installed), and
# what those runs changed (nothing).
set -u
OUT=${OUT:-/tmp/device-check}
mkdir -p "$OUT"
say() { printf '\n== %s\n' "$*"; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/col/ansible_collections/gpuops && ln -sfn "$PWD" /tmp/col/ansible_collections/gpuops/nvidia
export ANSIBLE_COLLECTIONS_PATH=/tmp/col ANSIBLE_NOCOLOR=1 ANSIBLE_DEPRECATION_WARNINGS=0 ANSIBLE_RETRY_FILES_ENABLED=0
export PYTHONUNBUFFERED=1
# The modules run under the Python that has the NVML binding (nvidia-ml-py, as python3-pynvml on a node): the image's.
py=$(command -v python3)
printf 'gpu_nodes:\n  hosts:\n    device:\n      ansible_connection: local\n      ansible_python_interpreter: %s\n' "$py" > /tmp/inv.yml
ansible() { timeout 300 python3 -m ansible "$@"; }

say machine
{ uname -a; cat /etc/os-release 2>/dev/null | head -2; echo "PID 1: $(cat /proc/1/comm)"; python3 -m ansible adhoc --version | head -1
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,vbios_version,mig.mode.current,persistence_mode --format=csv
  cat /proc/driver/nvidia/version; ls -l /dev/nvidia* 2>&1 | head; } 2>&1 | tee "$OUT/machine.txt"

say gpu_info
cat > /tmp/gpu_info.yml <<'EOF'
- name: Read the GPUs as the preflight does
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Read them
      gpuops.nvidia.gpu_info:
      register: __read
    - name: Keep the reading
      ansible.builtin.copy:
        content: "{{ {'gpu_info': __read.gpu_info} | to_nice_json(indent=1) }}\n"
        dest: "{{ lookup('ansible.builtin.env', 'OUT') }}/gpu_info.json"
        mode: "0644"
EOF
ansible playbook -i /tmp/inv.yml /tmp/gpu_info.yml > "$OUT/gpu_info.log" 2>&1
echo "rc=$?"
python3 - "$OUT/gpu_info.json" <<'EOF'
import json, sys
info = json.load(open(sys.argv[1]))["gpu_info"]
print("schema", info["schema_version"], "gpus", [(g["name"], g["bus_id"]) for g in info["pci"]["gpus"]], "nvml", info["nvml"].get("status"))
print("node", json.dumps(info["node"], sort_keys=True))
EOF

say "gpu_info's read, timed (ten reads in one process)"
PYTHONPATH=/tmp/col:/tmp/site python3 - <<'EOF' 2>&1 | tee "$OUT/timing.txt"
import time
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import gpu_info as g
collect = getattr(g, "collect", None)
if collect is None:
    print("no collect() in module_utils.node.gpu_info:", [n for n in dir(g) if not n.startswith("_")])
else:
    times = []
    for _ in range(10):
        t = time.perf_counter(); collect("/", None); times.append((time.perf_counter() - t) * 1000)
    print("collect ms:", " ".join(f"{x:.1f}" for x in times))
EOF

say "preflight (report only)"
snap() { find /etc /var/lib /usr/local /opt /boot /lib/modules -xdev -printf '%p %T@ %s\n' 2>/dev/null | sort; }
snap > /tmp/before.txt
ansible playbook -i /tmp/inv.yml playbooks/preflight.yml -e gpuops_preflight_report_only=true > "$OUT/preflight.log" 2>&1
echo "rc=$?"; grep -E -A40 '^TASK \[.*(Report|report|Say)' "$OUT/preflight.log" | head -80

say "node.yml, check mode and diff"
ansible playbook -i /tmp/inv.yml playbooks/node.yml --check --diff -e "gpuops_driver_kernel_release=$(uname -r)" > "$OUT/node-check.log" 2>&1
echo "rc=$?"; tail -60 "$OUT/node-check.log"

say "what the two runs changed under /etc, /var/lib, /usr/local, /opt, /boot and /lib/modules (they must change nothing)"
snap > /tmp/after.txt
diff /tmp/before.txt /tmp/after.txt | head -50 | tee "$OUT/changed.txt"
exit 0

"""lab/facts.py: the scale bench's hosts' facts in a jsonfile fact cache, read back by Ansible itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lab.facts import fact_cache_env, move_facts_to_cache

_READ_BACK = """
import json
from ansible.plugins.loader import cache_loader, init_plugin_loader
init_plugin_loader()
cache = cache_loader.get("ansible.builtin.jsonfile")
print(json.dumps({host: cache.get(host) for host in ("n1", "n2")}))
"""


def test_the_facts_move_to_a_cache_ansible_reads_and_the_rest_of_the_inventory_stays(tmp_path):
    inventory = {"all": {"vars": {"gpuops_cluster_kubeconfig": "/k"}, "children": {"gpu_nodes": {"hosts": {
        "n1": {"ansible_connection": "local", "gpuops_gpu_info": {"gpus": [{"index": 0}]}},
        "n2": {"ansible_connection": "local", "gpuops_gpu_info": {"gpus": []}, "gpuops_mig_manager_config": "c"},
    }}}}}
    slim = move_facts_to_cache(inventory, tmp_path / "facts")
    assert slim == {"all": {"vars": {"gpuops_cluster_kubeconfig": "/k"}, "children": {"gpu_nodes": {"hosts": {
        "n1": {"ansible_connection": "local"}, "n2": {"ansible_connection": "local", "gpuops_mig_manager_config": "c"}}}}}}
    out = subprocess.run([sys.executable, "-c", _READ_BACK], capture_output=True, text=True, check=True,
                         env={**os.environ, **fact_cache_env(tmp_path / "facts")})
    assert json.loads(out.stdout) == {"n1": {"gpuops_gpu_info": {"gpus": [{"index": 0}]}},
                                      "n2": {"gpuops_gpu_info": {"gpus": []}}}

"""The cluster roles' vars/main.yml hold constants and short references: a decision (a templated value with logic) is a
filter over module_utils, tested as Python (issue 60)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CLUSTER_ROLES = ["cluster_common", "cluster_prereqs", "dcgm_exporter", "device_plugin", "dra", "driver_container", "gpu_feature_discovery",
                 "mig_manager", "node_feature_discovery", "validation", "driver_upgrade", "mig_reconfigure", "uninstall"]
LONGEST = 200
# Left as it is while cluster.yml's batching becomes a public option (its read of the cluster is chosen there).
LONGER = {"__gpuops_dcgm_exporter_crd_found"}


def _templates(value: object, where: str):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _templates(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _templates(item, f"{where}[{index}]")
    elif isinstance(value, str) and ("{{" in value or "{%" in value):
        yield where, " ".join(value.split())


@pytest.mark.parametrize("role", CLUSTER_ROLES)
def test_no_long_expression_in_a_cluster_role_s_vars(role):
    path = REPO / "roles" / role / "vars/main.yml"
    if not path.exists():
        return
    variables = yaml.safe_load(path.read_text()) or {}
    long = [(where, len(text)) for name, value in variables.items() if name not in LONGER
            for where, text in _templates(value, name) if len(text) > LONGEST]
    assert not long, f"{role}: expressions over {LONGEST} characters (move the decision into a filter over module_utils): {long}"
    # No role's own input checks in Jinja: they are declared in meta/inputs.yml.
    assert not [name for name in variables if name.endswith("_input_errors")]

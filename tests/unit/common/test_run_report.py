"""The run's summary (module_utils/_common/run_report.py, the run_report filter) from what the roles publish."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.run_report import summary

READ = {"gpuops_gpu_info": {"schema_version": 7}}
BLOCKER = {"id": "secure_boot_unsigned", "severity": "blocker", "message": "m", "fix": "f"}
WARNING = {"id": "no_gpu", "severity": "warning", "message": "m", "fix": "f"}


def test_blockers_changes_and_reboots_per_host():
    hostvars = {
        "a": {**READ, "gpuops_preflight": {"findings": [BLOCKER, WARNING]}},
        "b": {**READ, "gpuops_node_changed": True, "gpuops_driver": {"reboot_required": True, "reboot_reasons": ["new kernel"]}},
        "c": {**READ, "gpuops_node_changed": True, "gpuops_nouveau": {"reboot_required": True, "reboot_reason": "nouveau"},
              "__gpuops_nouveau_after": {"loaded": False}},
        "d": {},
    }
    out = summary(["a", "b", "c", "d"], hostvars)
    assert out["blocked_hosts"] == ["a"] and out["blockers"]["a"] == [{"id": "secure_boot_unsigned", "message": "m", "fix": "f"}]
    assert out["warnings"] == {"a": ["no_gpu"]}
    assert out["changed_hosts"] == ["b", "c"]
    assert out["reboot_required"] == [{"host": "b", "reasons": ["new kernel"]}]
    assert out["rebooted_hosts"] == ["c"]
    assert out["not_read_hosts"] == ["d"]
    assert out["ok"] is False


def test_a_clean_run_is_ok_and_the_validation_s_verdicts_count():
    hostvars = {"a": READ, "b": READ}
    assert summary(["a", "b"], hostvars)["ok"] is True
    validation = {"nodes": {"a": {"ok": True}, "b": {"ok": False}}, "failed_nodes": ["b"], "failed": True}
    out = summary(["a", "b"], hostvars, validation)
    assert out["validation"] == {"ok": False, "failed_nodes": ["b"], "verdicts": {"a": "ok", "b": "failed"}}
    assert out["ok"] is False
    assert summary(["a"], hostvars, {"skipped": True})["validation"] is None

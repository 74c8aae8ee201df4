"""The node_labels module's plan: what each Node is patched with, for one label set and for several in one run."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.modules.node_labels import plan, plan_sets

CURRENT = {
    "a": {"nvidia.com/gpu.present": "true", "nvidia.com/mig.config": "all-1g.10gb"},
    "b": {"nvidia.com/gpu.present": "true"},
}


def test_only_what_differs_is_patched_and_null_removes():
    assert plan(CURRENT, {"a": {"nvidia.com/gpu.present": "true", "x": None}, "b": {"nvidia.com/gpu.present": "true"}},
                set()) == {}
    assert plan(CURRENT, {"a": {"nvidia.com/gpu.present": None}}, set()) == {"a": {"nvidia.com/gpu.present": None}}


def test_keep_existing_leaves_a_non_empty_value():
    wanted = {"a": {"nvidia.com/mig.config": "all-disabled"}, "b": {"nvidia.com/mig.config": "all-disabled"}}
    assert plan(CURRENT, wanted, {"nvidia.com/mig.config"}) == {"b": {"nvidia.com/mig.config": "all-disabled"}}


def test_sets_merge_into_one_patch_per_node_and_say_what_each_changed():
    sets = [
        {"labels": {"a": {"nvidia.com/gpu.deploy.dcgm": "true"}, "b": {"nvidia.com/gpu.present": "true"}},
         "keep_existing": []},
        {"labels": {"a": {"nvidia.com/mig.config": "all-disabled"}, "b": {"nvidia.com/mig.config": "all-disabled"}},
         "keep_existing": ["nvidia.com/mig.config"]},
    ]
    patches, changed = plan_sets(CURRENT, sets)
    assert patches == {"a": {"nvidia.com/gpu.deploy.dcgm": "true"}, "b": {"nvidia.com/mig.config": "all-disabled"}}
    assert changed == [["a"], ["b"]]


def test_a_later_set_wins_a_key_two_sets_name():
    sets = [{"labels": {"b": {"k": "one"}}, "keep_existing": []}, {"labels": {"b": {"k": "two"}}, "keep_existing": []}]
    assert plan_sets(CURRENT, sets) == ({"b": {"k": "two"}}, [["b"], ["b"]])


def test_sets_already_right_patch_nothing():
    sets = [{"labels": {"a": {"nvidia.com/mig.config": "other"}}, "keep_existing": ["nvidia.com/mig.config"]},
            {"labels": {}, "keep_existing": []}]
    assert plan_sets(CURRENT, sets) == ({}, [[], []])

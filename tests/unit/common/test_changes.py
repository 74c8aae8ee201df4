"""_common/changes.py: the change tracker - whether anything changed, and a diff only in diff mode, in Ansible's shape."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import FileResult


def test_no_diff_without_diff_mode_but_the_change_is_known():
    tracker = ChangeTracker(False)
    assert tracker.add("/etc/f", "old\n", "new\n")
    assert tracker.changed and [c.name for c in tracker.changes()] == ["/etc/f"]
    assert tracker.diff() is None
    assert tracker.update({"changed": True, "diff": "stale"}) == {"changed": True}


def test_one_change_in_diff_mode_is_one_dict_with_headers():
    tracker = ChangeTracker(True)
    tracker.add("/etc/f", "old\n", "new\n")
    assert tracker.diff() == {"before_header": "/etc/f", "after_header": "/etc/f", "before": "old\n", "after": "new\n"}
    assert tracker.update({"changed": True})["diff"] == tracker.diff()


def test_several_changes_are_a_list_in_their_order():
    tracker = ChangeTracker(True)
    tracker.add("/b", "1\n", "2\n")
    tracker.add("/a", None, "x\n")
    diff = tracker.diff()
    assert isinstance(diff, list)
    assert [(d["before_header"], d["before"], d["after"]) for d in diff] == [("/b", "1\n", "2\n"), ("/a", "", "x\n")]


def test_always_list_gives_one_change_as_a_list():
    tracker = ChangeTracker(True, always_list=True)
    tracker.add("/a", "", "x")
    assert tracker.diff() == [{"before_header": "/a", "after_header": "/a", "before": "", "after": "x"}]


def test_unchanged_entries_are_left_out():
    tracker = ChangeTracker(True)
    assert not tracker.add("/same", "x\n", "x\n")
    assert not tracker.changed and tracker.changes() == []
    assert tracker.diff() is None and "diff" not in tracker.update({})
    tracker.add("/changed", "x\n", "y\n")
    assert tracker.diff() == {"before_header": "/changed", "after_header": "/changed", "before": "x\n", "after": "y\n"}
    assert [c.name for c in tracker.changes()] == ["/changed"]


def test_absent_and_empty_are_different_but_both_shown_empty():
    tracker = ChangeTracker(True)
    assert tracker.add("/empty", None, "")
    diff = tracker.diff()
    assert isinstance(diff, dict) and diff["before"] == "" and diff["after"] == ""


def test_a_name_recorded_twice_keeps_its_first_before_and_its_last_after():
    tracker = ChangeTracker(True)
    tracker.add("/f", "a\n", "b\n")
    tracker.add("/f", "b\n", "c\n")
    assert tracker.diff() == {"before_header": "/f", "after_header": "/f", "before": "a\n", "after": "c\n"}
    assert not tracker.add("/f", "c\n", "a\n"), "back to where it was: no change"
    assert tracker.changes() == [] and tracker.diff() is None


def test_values_other_than_text():
    tracker = ChangeTracker(True)
    tracker.add("settings", {"mode": "legacy"}, {"mode": "cdi"})
    tracker.add("devices", ["0"], ["0", "1"])
    first, second = tracker.diff()
    # A mapping is left for Ansible to render; other values are shown as JSON.
    assert first["before"] == {"mode": "legacy"} and first["after"] == {"mode": "cdi"}
    assert second["before"] == '["0"]\n' and second["after"] == '["0", "1"]\n'


@pytest.mark.parametrize("diff_mode", [True, False])
def test_file_results_feed_the_tracker(diff_mode):
    tracker = ChangeTracker(diff_mode)
    assert tracker.add_file(FileResult(path="/etc/a", before="old\n", after=None))
    assert not tracker.add_file(FileResult(path="/etc/b", before="same\n", after="same\n"))
    assert tracker.changed
    expected = {"before_header": "/etc/a", "after_header": "/etc/a", "before": "old\n", "after": ""}
    assert tracker.diff() == (expected if diff_mode else None)

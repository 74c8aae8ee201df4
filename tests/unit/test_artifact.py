"""What `ansible-galaxy collection build` ships: what users run, not the checkout's development setup; and the internals
documented as such."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PUBLIC_FILTERS = {"run_report", "preflight", "hosts_without"}


def test_the_artifact_ships_no_development_setup(tmp_path):
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), str(REPO)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    (archive,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    for left_out in ("ansible.cfg", "requirements.txt", "docs/development.md", "docs/lab.md", "docs/bench.md", "Makefile"):
        assert left_out not in names
    assert not [n for n in names if n.startswith(("changelogs/fragments/", "lab/", "tests/", "molecule/"))]
    for shipped in ("README.md", "execution-environment.yml", "playbooks/site.yml", "playbooks/report.yml", "docs/cluster.md",
                    "docs/day2.md", "inventories/example/hosts.yml", "roles/cluster_common/files/deployer-rbac.yml",
                    "changelogs/changelog.yaml"):
        assert shipped in names


def test_the_internal_filters_say_so():
    for doc in sorted((REPO / "plugins/filter").glob("*.yml")):
        first = yaml.safe_load(doc.read_text())["DOCUMENTATION"]["description"][0]
        assert first.startswith("Internal to the collection's roles") == (doc.stem not in PUBLIC_FILTERS), doc.name


def test_the_internal_entry_points_say_so():
    specs = yaml.safe_load((REPO / "roles/node_common/meta/argument_specs.yml").read_text())["argument_specs"]
    assert all(spec["short_description"].startswith("(internal) ") for spec in specs.values())
    specs = yaml.safe_load((REPO / "roles/cluster_common/meta/argument_specs.yml").read_text())["argument_specs"]
    assert {name for name, spec in specs.items() if spec["short_description"].startswith("(internal) ")} == {"settings", "unread"}

"""execution-environment.yml (ansible-builder 3): a base image named in full, and the collection installed by the galaxy
stage from the archive `ansible-galaxy collection build` makes of this checkout (its version, galaxy.yml's)."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
EE = yaml.safe_load((REPO / "execution-environment.yml").read_text())
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())


def test_the_base_image_is_fully_qualified():
    name = EE["images"]["base_image"]["name"]
    registry, rest = name.split("/", 1) if "/" in name else (name, "")
    # A registry host has a dot or a port; a short name (fedora-minimal:41) resolves by each host's registries.conf.
    assert ("." in registry or ":" in registry) and rest and ":" in rest.rsplit("/", 1)[-1], name


def test_the_collection_is_a_galaxy_file_requirement_of_the_archive_built_here():
    archive = f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"
    (entry,) = EE["dependencies"]["galaxy"]["collections"]
    assert entry == {"name": f"collections/{archive}", "type": "file"}
    assert {"src": archive, "dest": "collections"} in EE["additional_build_files"]
    assert "additional_build_steps" not in EE  # no hand-made install step beside the galaxy stage's


def test_the_ee_s_ansible_core_is_the_tested_one():
    pinned = next(line for line in (REPO / "requirements.txt").read_text().splitlines() if line.startswith("ansible-core=="))
    assert EE["dependencies"]["ansible_core"]["package_pip"] == pinned

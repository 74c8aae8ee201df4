"""Running a module's main() in a unit test and getting back what it would have returned."""

from __future__ import annotations

from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class ModuleExit(Exception):
    """Raised instead of exiting, carrying the result dict (with `failed`)."""


def _exit_json(self, **kw):
    raise ModuleExit({"failed": False, **kw})


def _fail_json(self, **kw):
    raise ModuleExit({"failed": True, **kw})


def call(main, params: dict) -> dict:
    """Run main() with these module arguments; return its result, failed or not."""
    with patch_module_args(params), mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json), pytest.raises(ModuleExit) as exc:
        main()
    return exc.value.args[0]


def role_templar(role_dir, **overrides):
    """A Templar over a role's defaults and variables as a play holds them (with `overrides` over them), that knows the
    collection's filters as a play does (gpuops.nvidia.<name>): the role's expressions templated as in a run, without
    setting up Ansible's plugin loader for the collection (which would change how the other tests import it)."""
    import importlib
    from pathlib import Path

    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    loader = DataLoader()
    role_dir = Path(role_dir)
    variables = {}
    for part in ("defaults/main.yml", "vars/main.yml"):
        if (role_dir / part).exists():
            variables.update(loader.load_from_file(str(role_dir / part), trusted_as_template=True) or {})
    templar = Templar(loader=loader, variables={**variables, **overrides})
    filters = templar._engine.environment.filters  # Templar.environment is deprecated; the engine's is the same
    for path in sorted((Path(__file__).parents[2] / "plugins/filter").glob("*.py")):
        plugins = importlib.import_module(f"ansible_collections.gpuops.nvidia.plugins.filter.{path.stem}").FilterModule()
        for name, function in plugins.filters().items():
            filters[f"gpuops.nvidia.{name}"] = function
    return templar

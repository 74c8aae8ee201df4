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

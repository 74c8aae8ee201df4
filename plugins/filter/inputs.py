# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.inputs import input_errors


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"input_errors": input_errors}

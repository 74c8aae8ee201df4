# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host roles' checks across their variables, which their meta/inputs.yml names as `node.<rule>`.

As module_utils/cluster/inputs.py for the cluster roles: each rule takes the values of the variables the declaration
passes it and returns one message per error. Run on the controller by the role_inputs action (once per host in
node.yml's first task), so it imports nothing but the lists it checks against.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import METHODS, REPOSITORIES

# A variable that is not defined.
UNSET: Any = object()


def _named(value: Any, own: str, driver_value: Any, driver: str) -> str:
    """The variable a preflight setting came from: the driver role's where it is set to the same value (the preflight's
    default takes it from there), else the preflight's own."""
    return driver if driver_value is not UNSET and driver_value == value else own


def driver_method(method: Any, driver_method: Any = UNSET) -> list[str]:
    """preflight: the driver method it reports on; named as gpuops_driver_method, with that variable's choices (none
    is the preflight's only), where it came from there."""
    variable = _named(method, "gpuops_preflight_driver_method", driver_method, "gpuops_driver_method")
    methods = [*METHODS, *([] if variable == "gpuops_driver_method" else ["none"])]
    if method in methods:
        return []
    return [f"{variable}: {json.dumps(method, default=str)} is not one of {', '.join(methods)}"]


def driver_repository(repository: Any, driver_repository: Any = UNSET) -> list[str]:
    """preflight: the driver repository it reports on, named as the variable it came from."""
    variable = _named(repository, "gpuops_preflight_driver_repository", driver_repository, "gpuops_driver_repository")
    if repository in REPOSITORIES:
        return []
    return [f"{variable}: {json.dumps(repository, default=str)} is not one of {', '.join(REPOSITORIES)}"]


def nri_plugin_source(source: Any) -> bool:
    """Whether the NRI plugin's source is one the container_toolkit role takes: an https, http or file URL (fetched by
    the node), or an absolute path on the controller (copied)."""
    return isinstance(source, str) and (re.match(r"^(https?|file)://[^ ]+$", source) is not None
                                        or (source.startswith("/") and " " not in source.strip()))


def nri_plugin(mode: Any, source: Any, index: Any) -> list[str]:
    """container_toolkit: NRI mode runs the toolkit's NRI plugin, which NVIDIA's packages do not ship (only its installer
    image, docs/nri.md): its binary's source must be given; its index is NRI's (0 to 99). Nothing asked of other modes."""
    if mode != "nri":
        return []
    errors = []
    if not nri_plugin_source(source):
        errors.append(f"gpuops_container_toolkit_nri_plugin_source: {json.dumps(source, default=str)} is not an https, http "
                      "or file URL nor an absolute path on the controller: NRI mode (gpuops_container_toolkit_mode: nri) "
                      "runs the toolkit's NRI plugin, which NVIDIA's packages do not ship; name its binary there (docs/nri.md)")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= 99:
        errors.append(f"gpuops_container_toolkit_nri_plugin_index: {json.dumps(index, default=str)} is not an integer from 0 "
                      "to 99 (the plugin's place among the runtime's NRI plugins)")
    return errors


RULES: dict[str, Callable[..., list[str]]] = {
    "driver_method": driver_method, "driver_repository": driver_repository, "nri_plugin": nri_plugin,
}

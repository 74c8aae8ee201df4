# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The connection options of the modules that talk to the API server (module_utils/kube.py)."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description: Path to the kubeconfig; default C($KUBECONFIG), C(~/.kube/config), then the in-cluster service account.
    type: path
  context:
    description: The kubeconfig context to use.
    type: str
requirements:
  - kubernetes (the Python client) on the host the module runs on
"""

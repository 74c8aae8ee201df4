# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""The PCI ids gpu_info reports (`vendor_id`, `class` of each device): the host side reads them from sysfs
(node/hardware.py), the cluster side tells a GPU's mode from them (cluster/gfd.py)."""

from __future__ import annotations

NVIDIA_VENDOR = "10de"
MELLANOX_VENDOR = "15b3"

# PCI class codes (base class + subclass, four hex digits).
CLASS_VGA = "0300"
CLASS_3D = "0302"
CLASS_BRIDGE_OTHER = "0680"  # NVSwitch
CLASS_NETWORK = "0200"
CLASS_INFINIBAND = "0207"
GPU_CLASSES = (CLASS_VGA, CLASS_3D)

"""The lab's own unit tests: no root, no network, no machine (`make unit` runs them beside the collection's).

The stand-ins are checked against the collection's own reading of the same profile (sim/test_gfd.py,
sim/test_migmgr.py): gpu_info's facts of a lab profile, as the collection's unit tests read them.
"""

from __future__ import annotations

from tests.unit.conftest import info_of

__all__ = ["info_of"]

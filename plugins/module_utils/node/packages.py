# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which recorded packages an uninstall may purge: apt's own simulation decides, never a guess.

The roles record what their installs added (node_common record_planned / record_packages). Purging such a package
also removes every package that depends on it, and some of those may not be ours: the NVML binding the preflight
installed pulls in libnvidia-ml1, on which a driver kept on the node depends. So the purge is simulated first; a
recorded package whose removal takes a package that is not recorded (or installs one) stays, named with what needs it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# apt-get -s lines: "Inst NAME [old] (new ...)", "Remv NAME [ver]", "Purg NAME [ver]"; NAME may carry ":arch".
_SIM_LINE = re.compile(r"^(Inst|Remv|Purg) ([^\s:]+)(?::\S+)?(?: |$)", re.MULTILINE)


@dataclass(frozen=True)
class Simulation:
    """What one simulated purge would do: packages removed, packages installed, or why apt refused (error)."""

    removed: frozenset[str] = frozenset()
    installed: frozenset[str] = frozenset()
    error: str = ""


@dataclass
class Plan:
    """purge: the recorded packages that go; kept: each recorded package that stays, with what needs it."""

    purge: list[str] = field(default_factory=list)
    kept: dict[str, list[str]] = field(default_factory=dict)


class PlanError(Exception):
    pass


def parse_simulation(stdout: str) -> Simulation:
    removed: set[str] = set()
    installed: set[str] = set()
    for action, name in _SIM_LINE.findall(stdout):
        (installed if action == "Inst" else removed).add(name)
    return Simulation(frozenset(removed), frozenset(installed))


def read_record(text: str) -> list[str]:
    """A record's package names, one per line, in order, each once."""
    return list(dict.fromkeys(line.strip() for line in text.splitlines() if line.strip()))


def present(status_lines: str) -> set[str]:
    """The packages dpkg still has something of (installed, half-done, or config files), from
    `dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n'`: the second letter of the status is not `n`."""
    found = set()
    for line in status_lines.splitlines():
        parts = line.split()
        if len(parts) >= 2 and len(parts[1]) >= 2 and parts[1][1] != "n":
            found.add(parts[0].split(":")[0])
    return found


def _foreign(sim: Simulation, recorded: set[str]) -> list[str]:
    if sim.error:
        return [f"(apt refuses: {sim.error})"]
    return sorted((sim.removed - recorded) | {f"{name} (installed)" for name in sim.installed})


def _per_package(candidates: list[str], ours: set[str], simulate: Callable[[list[str]], Simulation]) -> Plan:
    plan = Plan()
    for name in candidates:
        foreign = _foreign(simulate([name]), ours)
        if foreign:
            plan.kept[name] = foreign
        else:
            plan.purge.append(name)
    return plan


def _halving(group: list[str], foreign: list[str], ours: set[str], simulate: Callable[[list[str]], Simulation],
             plan: Plan) -> None:
    """Sorts a group whose simulated purge changes a package that is not recorded: each half is simulated, a clean one
    goes whole, the other is halved again down to the single packages that stay. With k such packages among n that is
    about 2k·log2(n) simulations instead of n (apt reads its whole cache for each, a second or two)."""
    if not foreign:
        plan.purge.extend(group)
    elif len(group) == 1:
        plan.kept[group[0]] = foreign
    else:
        for half in (group[:len(group) // 2], group[len(group) // 2:]):
            _halving(half, _foreign(simulate(half), ours), ours, simulate, plan)


def plan_purge(recorded: Iterable[str], present_now: set[str], simulate: Callable[[list[str]], Simulation]) -> Plan:
    """The recorded packages to purge: all that are present, in one simulated transaction, when it removes nothing
    else; otherwise the ones whose removal takes a package that is not recorded stay, found by halving the set (each
    alone when the halves' purges together change more than each did)."""
    names = list(recorded)
    ours = set(names)
    candidates = [n for n in names if n in present_now]
    if not candidates:
        return Plan()
    first = _foreign(simulate(candidates), ours)
    if not first:
        return Plan(purge=candidates)

    def together(purge: list[str]) -> list[str]:
        # The whole set's answer is known already (the first simulation): not asked of apt again.
        return first if purge == candidates else _foreign(simulate(purge), ours) if purge else []

    plan = Plan()
    _halving(candidates, first, ours, simulate, plan)
    if together(plan.purge):
        plan = _per_package(candidates, ours, simulate)
        foreign = together(plan.purge)
        if foreign:
            raise PlanError(f"purging {', '.join(plan.purge)} together would also change {', '.join(foreign)}, though each "
                            "alone would not; nothing was purged")
    return plan

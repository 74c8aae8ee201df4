"""packages_purge end to end against a small apt world: dpkg-query and apt-get stubbed by a dependency model in which
removing a package removes every installed package that depends on it, as apt does."""

from __future__ import annotations

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import packages as pk
from ansible_collections.gpuops.nvidia.plugins.modules import packages_purge

from ..harness import call

# apt-get -s purge on the lab's Debian 12 machine, cut down: a removal cascading to a package that depends on it.
SIMULATED = """\
NOTE: This is only a simulation!
      apt-get needs root privileges for real execution.
Reading package lists...
The following packages will be REMOVED:
  libnvidia-ml1* nvidia-driver-bin* python3-pynvml*
Purg python3-pynvml [11.5.0-1]
Purg nvidia-driver-bin [535.247.01-1~deb12u1]
Purg libnvidia-ml1:amd64 [535.247.01-1~deb12u1]
"""


def test_a_simulation_names_what_goes_and_what_would_be_installed():
    sim = pk.parse_simulation(SIMULATED + "Inst nvidia-alternative (535.247.01-1~deb12u1 Debian:12.12/stable [amd64])\n")
    assert sim.removed == {"python3-pynvml", "nvidia-driver-bin", "libnvidia-ml1"}
    assert sim.installed == {"nvidia-alternative"}


def test_present_counts_config_files_and_not_removed_packages():
    out = "gcc ii \ndkms rc \nlibfoo un \nlibnvidia-ml1:amd64 hi \n"
    assert pk.present(out) == {"gcc", "dkms", "libnvidia-ml1"}


class World:
    """Installed packages and their dependencies; apt-get -s purge removes the names and, in turn, whatever depends on
    something removed."""

    def __init__(self, depends: dict[str, list[str]]) -> None:
        self.depends = depends
        self.calls: list[list[str]] = []

    def cascade(self, names: list[str]) -> list[str]:
        gone = set(names) & set(self.depends)
        while True:
            more = {p for p, deps in self.depends.items() if p not in gone and gone.intersection(deps)}
            if not more:
                return sorted(gone)
            gone |= more

    def run_command(self, _module, argv, **_kw):
        self.calls.append(argv)
        if argv[0].endswith("dpkg-query"):
            names = argv[4:]
            return 0, "".join(f"{n} {'ii' if n in self.depends else 'un'} \n" for n in names), ""
        assert argv[0].endswith("apt-get") and "--ignore-hold" in argv
        names = [a for a in argv[1:] if not a.startswith("-") and a not in ("purge", "DPkg::Lock::Timeout=300")]
        gone = self.cascade(names)
        if "-s" in argv:
            return 0, "".join(f"Purg {n} [1.0]\n" for n in gone), ""
        assert "-y" in argv and "--allow-change-held-packages" in argv
        for name in gone:
            del self.depends[name]
        return 0, "", ""


@pytest.fixture
def node(tmp_path, monkeypatch):
    # The preflight's NVML binding pulled in libnvidia-ml1 and nvidia-alternative; the driver, installed after it by
    # something that kept no record, depends on nvidia-alternative.
    world = World({"python3-pynvml": ["libnvidia-ml1"], "libnvidia-ml1": ["nvidia-alternative"], "nvidia-alternative": [],
                   "pciutils": [], "nvidia-driver-bin": ["nvidia-alternative"], "bash": []})

    def run_command(module, argv, **kw):
        return world.run_command(module, argv, **kw)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")
    preflight = tmp_path / "preflight-packages"
    preflight.write_text("python3-pynvml\nlibnvidia-ml1\nnvidia-alternative\npciutils\n")

    def run(records, check=False):
        return call(packages_purge.main, {"records": [str(r) for r in records], "_ansible_check_mode": check, "_ansible_diff": True})

    return world, preflight, run


def test_a_recorded_package_a_package_not_recorded_needs_stays_and_stays_recorded(node):
    world, preflight, run = node
    res = run([preflight])
    assert res["changed"] and res["purged"] == ["python3-pynvml", "libnvidia-ml1", "pciutils"]
    assert res["kept"] == {"nvidia-alternative": ["nvidia-driver-bin"]}
    assert set(world.depends) == {"nvidia-alternative", "nvidia-driver-bin", "bash"}
    assert preflight.read_text() == "nvidia-alternative\n"
    again = run([preflight])
    assert not again["changed"] and again["purged"] == [] and preflight.read_text() == "nvidia-alternative\n"


def test_with_the_driver_recorded_too_everything_goes_in_one_transaction(node, tmp_path):
    world, preflight, run = node
    driver = tmp_path / "driver-packages"
    driver.write_text("nvidia-driver-bin\nnvidia-alternative\n")
    res = run([preflight, driver, tmp_path / "no-such-record"])
    assert res["changed"] and res["kept"] == {}
    assert sorted(res["purged"]) == ["libnvidia-ml1", "nvidia-alternative", "nvidia-driver-bin", "pciutils", "python3-pynvml"]
    assert set(world.depends) == {"bash"}
    assert not preflight.exists() and not driver.exists()
    assert res["records"] == {str(preflight): "removed", str(driver): "removed", str(tmp_path / "no-such-record"): "absent"}
    purges = [c for c in world.calls if "-y" in c]
    assert len(purges) == 1
    assert not run([preflight, driver])["changed"]


def test_check_mode_says_what_would_go_and_changes_nothing(node):
    world, preflight, run = node
    res = run([preflight], check=True)
    assert res["changed"] and res["diff"][0]["before"] == "python3-pynvml\nlibnvidia-ml1\npciutils\n"
    assert "nvidia-driver-bin" in world.depends and "python3-pynvml" in world.depends
    assert preflight.read_text() == "python3-pynvml\nlibnvidia-ml1\nnvidia-alternative\npciutils\n"
    assert not [c for c in world.calls if "-y" in c]


def test_without_a_record_nothing_is_asked_of_apt(node, tmp_path):
    world, _preflight, run = node
    res = run([tmp_path / "none"])
    assert not res["changed"] and res["purged"] == [] and world.calls == []


def test_packages_that_each_go_alone_but_not_together_fail_before_anything_goes():
    def simulate(names):
        return pk.Simulation(removed=frozenset(names) | ({"bash"} if len(names) > 1 else frozenset()))

    with pytest.raises(pk.PlanError, match="together would also change bash"):
        pk.plan_purge(["a", "b"], {"a", "b"}, simulate)


def test_a_simulation_apt_refuses_keeps_the_package():
    plan = pk.plan_purge(["a", "b"], {"a", "b"},
                         lambda names: pk.Simulation(error="E: Unable to locate package b") if "b" in names else pk.Simulation(frozenset(names)))
    assert plan.purge == ["a"] and plan.kept == {"b": ["(apt refuses: E: Unable to locate package b)"]}


def _reference(recorded, world):
    """The plan by one simulation per package, as the module did before it halved: what each alone would take."""
    ours = set(recorded)
    purge, kept = [], {}
    for name in recorded:
        foreign = sorted(set(world.cascade([name])) - ours)
        if foreign:
            kept[name] = foreign
        else:
            purge.append(name)
    return purge, kept


def test_one_package_others_need_among_forty_is_found_in_a_few_simulations():
    # A driver's forty recorded packages, one of which (libnvidia-ml1) a package that is not recorded depends on.
    recorded = [f"nvidia-pkg-{i:02d}" for i in range(40)]
    recorded[23] = "libnvidia-ml1"
    world = World({**{n: [] for n in recorded}, "python3-pynvml": ["libnvidia-ml1"]})
    sims = []

    def simulate(names):
        sims.append(list(names))
        return pk.Simulation(removed=frozenset(world.cascade(names)))

    plan = pk.plan_purge(recorded, set(recorded), simulate)
    assert plan.kept == {"libnvidia-ml1": ["python3-pynvml"]}
    assert plan.purge == [n for n in recorded if n != "libnvidia-ml1"]
    # The whole set, about two halves per level down to the one package (log2 40 < 6), and the final check.
    assert len(sims) <= 2 + 2 * 6, sims


@pytest.mark.parametrize("seed", range(30))
def test_halving_decides_as_one_simulation_per_package_would(seed):
    import random

    rng = random.Random(seed)
    names = [f"p{i}" for i in range(rng.randint(1, 25))]
    # A random dependency graph (each package on some earlier ones), some of it not recorded.
    world = World({n: rng.sample(names[:i], k=min(i, rng.randint(0, 2))) for i, n in enumerate(names)})
    recorded = [n for n in names if rng.random() < 0.7]
    plan = pk.plan_purge(recorded, set(recorded), lambda ns: pk.Simulation(removed=frozenset(world.cascade(ns))))
    purge, kept = _reference(recorded, world)
    assert (plan.purge, plan.kept) == (purge, kept)


def test_the_whole_set_is_simulated_once():
    # Each alone is clean, both together are not: the whole set's simulation is the first one, never asked again.
    sims = []

    def simulate(names):
        sims.append(tuple(names))
        return pk.Simulation(removed=frozenset(names) | ({"bash"} if len(names) > 1 else frozenset()))

    with pytest.raises(pk.PlanError):
        pk.plan_purge(["a", "b"], {"a", "b"}, simulate)
    assert sims.count(("a", "b")) == 1, sims

"""The lab's compiler script (molecule/shared/files/ccache_compiler.sh), which the DKMS builds on the lab machines call
under the compilers' names: every call goes to ccache with this directory off PATH, and NVIDIA's conftest probes go
under names made from their content, with the PID out of their command line, so that ccache can keep them."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "molecule/shared/files/ccache_compiler.sh"


def setup(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A links directory naming the script, a fake ccache that prints its arguments and PATH, a build directory."""
    links, fake, work = tmp_path / "links", tmp_path / "bin", tmp_path / "build"
    for d in (links, fake, work):
        d.mkdir()
    (links / "x86_64-linux-gnu-gcc-13").symlink_to(SCRIPT)
    (fake / "ccache").write_text('#!/bin/sh\nfor a do printf "%s\\n" "$a"; done\nprintf "PATH=%s\\n" "$PATH"\n')
    (fake / "ccache").chmod(0o755)
    env = {**os.environ, "PATH": f"{links}:{fake}:/usr/bin:/bin:{links}"}
    return links, work, env


def call(links: Path, work: Path, env: dict, *args: str) -> list[str]:
    res = subprocess.run([str(links / "x86_64-linux-gnu-gcc-13"), *args], cwd=work, env=env, capture_output=True,
                         text=True, check=True)
    return res.stdout.splitlines()


def test_a_compile_goes_to_ccache_unchanged_under_its_name_with_this_directory_off_path(tmp_path):
    links, work, env = setup(tmp_path)
    out = call(links, work, env, "-O2", "-c", "nv.c", "-o", "nv.o")
    assert out[:-1] == ["x86_64-linux-gnu-gcc-13", "-O2", "-c", "nv.c", "-o", "nv.o"]
    assert out[-1] == f"PATH={tmp_path / 'bin'}:/usr/bin:/bin"


def test_a_conftest_probe_compiles_under_its_content_name_with_the_pid_out_of_its_macros(tmp_path):
    links, work, env = setup(tmp_path)
    source = "#include <linux/kernel.h>\nint probe;\n"
    (work / "conftest4242.c").write_text(source)
    out = call(links, work, env, "-O2", '-DKBUILD_BASENAME="#conftest4242"', '-DKBUILD_MODNAME="#conftest4242"', "-c",
               "conftest4242.c")
    stable = f"conftest-lab-{hashlib.sha256(source.encode()).hexdigest()}.c"
    # The object where conftest.sh looks for it (it tests for conftest$$.o), from the copy beside the probe.
    assert out[:-1] == ["x86_64-linux-gnu-gcc-13", "-O2", '-DKBUILD_BASENAME="#conftest"', '-DKBUILD_MODNAME="#conftest"',
                        "-c", stable, "-o", "conftest4242.o"]
    assert (work / stable).read_text() == source
    # Another run of the script (another PID) with the same probe: the same command, so ccache's same entry.
    (work / "conftest977.c").write_text(source)
    again = call(links, work, env, "-O2", '-DKBUILD_BASENAME="#conftest977"', '-DKBUILD_MODNAME="#conftest977"', "-c",
                 "conftest977.c")
    assert again[:-1] == [a.replace("4242", "977") if a.endswith(".o") else a for a in out[:-1]]
    assert sorted(p.name for p in work.iterdir()) == sorted(["conftest4242.c", "conftest977.c", stable])


def test_a_probe_with_its_own_output_keeps_it_and_a_preprocessing_call_is_left_as_it_is(tmp_path):
    links, work, env = setup(tmp_path)
    (work / "conftest51.c").write_text("int x;\n")
    out = call(links, work, env, "-c", "-x", "c", "conftest51.c", "-o", "probe.o")
    assert out[1:4] == ["-c", "-x", "c"] and out[4].startswith("conftest-lab-") and out[5:7] == ["-o", "probe.o"]
    assert len(out) == 8
    # -E (conftest.sh reads the preprocessor's output): not a compile, not touched.
    pre = call(links, work, env, "-E", "-P", "-I/x", "-o", "conftest51", "conftest51.c")
    assert pre[:-1] == ["x86_64-linux-gnu-gcc-13", "-E", "-P", "-I/x", "-o", "conftest51", "conftest51.c"]


def test_a_probe_name_with_no_file_is_left_to_the_compiler(tmp_path):
    links, work, env = setup(tmp_path)
    out = call(links, work, env, "-c", "conftest12.c")
    assert out[:-1] == ["x86_64-linux-gnu-gcc-13", "-c", "conftest12.c"]

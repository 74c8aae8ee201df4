"""Stand-in for pip's get-pip.py, used by ansible-test to put pip into each sanity-test venv.

ansible-test downloads the real script from a host outside the package registries, which this
project's machines cannot reach; `make sanity` places this file in ansible-test's cache instead.
It installs pip from the interpreter's own ensurepip, then has that pip install exactly the
packages ansible-test asked for (pinned, from PyPI), as get-pip.py would.
"""

from __future__ import annotations

import subprocess
import sys

# get-pip.py options that pip itself does not take: ansible-test passes them to say that no
# setuptools or wheel should be added, which plain `pip install` does not add anyway.
GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main() -> int:
    args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    return subprocess.run([sys.executable, "-m", "pip", "install", *args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())

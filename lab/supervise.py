"""Keep one lab machine booted: run its systemd-nspawn and boot it again when it reboots.

`systemd-nspawn --boot` exits with status 133 when the machine inside reboots. The supervisor
(`python -m lab.supervise [OPTIONS] -- systemd-nspawn ...`) runs the command, and when it exits with
133 starts it again with the same arguments (same root, so the same sshd port and files), in the
same fresh cgroups. Any other exit ends the supervisor with that status. SIGTERM and SIGINT are
forwarded to the running nspawn (which powers the machine off cleanly); the supervisor waits for it
and exits without starting it again. Restarts are bounded (a reboot loop gives up) and each one is
logged on stderr, which the lab points at the machine's console log. The PID of the running nspawn
is kept in --pid-file, so `lab down` can reach it by PID if the supervisor itself does not go.

Options: --pid-file FILE, --cgroup DIR (repeatable: each nspawn joins these cgroups, made afresh
before every start), --max-restarts N and --window SECONDS (at most N restarts within that time).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .cgroups import remove_cgroup

REBOOT_STATUS = 133
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
DEFAULT_MAX_RESTARTS = 5
DEFAULT_WINDOW = 60.0


def process_alive(pid: int) -> bool:
    """Whether pid runs. A zombie has exited, whoever still has to reap it (a process whose parent
    exited before it, as kwokctl's components are, waits for init to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class RestartBudget:
    """At most `limit` restarts within any `window` seconds: a machine caught in a reboot loop is given up."""

    limit: int = DEFAULT_MAX_RESTARTS
    window: float = DEFAULT_WINDOW
    times: list[float] = field(default_factory=list)

    def allow(self, now: float) -> bool:
        """Whether one more restart at `now` stays within the budget; if so, it is counted."""
        self.times = [t for t in self.times if now - t < self.window]
        if len(self.times) >= self.limit:
            return False
        self.times.append(now)
        return True


def exit_status(returncode: int) -> int:
    """A Popen return code as a shell would report it (a signal N is 128+N)."""
    return 128 - returncode if returncode < 0 else returncode


def should_restart(status: int, stopping: bool) -> bool:
    """Start the machine again only when it rebooted itself, never when it was asked to stop."""
    return status == REBOOT_STATUS and not stopping


class Supervisor:
    """Runs `cmd`, starting it again after a reboot; see the module's docstring."""

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        pid_file: Path | None = None,
        cgroups: Sequence[Path] = (),
        budget: RestartBudget | None = None,
        log: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not cmd:
            raise ValueError("no command to supervise")
        self.cmd = list(cmd)
        self.pid_file = pid_file
        self.cgroups = list(cgroups)
        self.budget = budget or RestartBudget()
        self.log_file = log
        self.clock = clock
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.starts = 0

    def log(self, message: str) -> None:
        out = self.log_file or sys.stderr
        out.write(f"[gpuops-lab supervise {time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}] {message}\n")
        out.flush()

    # -- signals -----------------------------------------------------------------------------
    def handle_signal(self, signum: int, _frame: object = None) -> None:
        """A stop request: remember it (no more restarts) and pass it on to the running child."""
        self.stopping = True
        self.forward(signum)

    def forward(self, signum: int) -> None:
        child = self.child
        if child is not None:
            # send_signal polls first: a child already reaped is never signalled (its PID may be reused).
            child.send_signal(signum)

    def install_signal_handlers(self) -> None:
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self.handle_signal)

    # -- the child ---------------------------------------------------------------------------
    def prepare_cgroups(self) -> None:
        """Fresh cgroups for each boot, as the first boot had (the last boot's tree is left empty)."""
        for cgroup in self.cgroups:
            try:
                remove_cgroup(cgroup)
            except OSError as exc:
                if self.starts == 0:
                    raise
                self.log(f"could not remove cgroup {cgroup} of the last boot ({exc}); reusing it")
            cgroup.mkdir(exist_ok=True)

    def _enter_cgroups(self) -> None:
        # Runs between fork and exec: only writes to cgroup.procs.
        for cgroup in self.cgroups:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    def start(self) -> subprocess.Popen[bytes]:
        self.prepare_cgroups()
        child = subprocess.Popen(
            self.cmd,
            stdin=subprocess.DEVNULL,
            # Its own session, as the lab has always started nspawn: a signal to the supervisor's
            # process group never reaches it; only what the supervisor forwards does.
            start_new_session=True,
            preexec_fn=self._enter_cgroups if self.cgroups else None,
        )
        self.child = child
        self.starts += 1
        if self.pid_file is not None:
            tmp = self.pid_file.with_name(self.pid_file.name + ".tmp")
            tmp.write_text(f"{child.pid}\n")
            tmp.replace(self.pid_file)
        if self.stopping:
            # A stop request that came while the child was being started found no child to forward to.
            child.send_signal(signal.SIGTERM)
        return child

    def run(self) -> int:
        """Run until the child exits other than by a reboot; return the exit status to leave with."""
        try:
            child = self.start()
            self.log(f"started {self.cmd[0]} as pid {child.pid}")
            while True:
                status = exit_status(child.wait())
                if not should_restart(status, self.stopping):
                    why = " after a stop request" if self.stopping else ""
                    self.log(f"{self.cmd[0]} (pid {child.pid}) exited with status {status}{why}")
                    return 0 if self.stopping and status == REBOOT_STATUS else status
                if not self.budget.allow(self.clock()):
                    self.log(
                        f"machine rebooted (exit {status}) more than {self.budget.limit} times within {self.budget.window:.0f}s: "
                        "giving up, not starting it again"
                    )
                    return status
                previous = child.pid
                child = self.start()
                self.log(f"machine rebooted (pid {previous} exited with status {status}): started it again as pid {child.pid} (boot {self.starts})")
        finally:
            if self.pid_file is not None:
                self.pid_file.unlink(missing_ok=True)


@dataclass
class Options:
    """The supervisor's command line: options before `--`, the command after it."""

    cmd: list[str]
    pid_file: Path | None = None
    cgroups: list[Path] = field(default_factory=list)
    max_restarts: int = DEFAULT_MAX_RESTARTS
    window: float = DEFAULT_WINDOW


USAGE = "usage: python -m lab.supervise [--pid-file F] [--cgroup D]... [--max-restarts N] [--window S] -- COMMAND..."


def parse_args(argv: Sequence[str]) -> Options:
    """Parse `[OPTIONS] -- COMMAND...`; a mistake exits with a one-line message."""
    argv = list(argv)
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise SystemExit(USAGE)
    split = argv.index("--")
    found = Options(cmd=argv[split + 1 :])
    opts = iter(argv[:split])
    for opt in opts:
        value = next(opts, None)
        if value is None:
            raise SystemExit(f"lab.supervise: {opt} needs a value")
        if opt == "--pid-file":
            found.pid_file = Path(value)
        elif opt == "--cgroup":
            found.cgroups.append(Path(value))
        elif opt == "--max-restarts":
            found.max_restarts = int(value)
        elif opt == "--window":
            found.window = float(value)
        else:
            raise SystemExit(f"lab.supervise: unknown option {opt}\n{USAGE}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    sup = Supervisor(opts.cmd, pid_file=opts.pid_file, cgroups=opts.cgroups, budget=RestartBudget(opts.max_restarts, opts.window))
    sup.install_signal_handlers()
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())

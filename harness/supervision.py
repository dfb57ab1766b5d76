"""supervisord running a rendered configuration (deploy/supervisor.py), as `make run` does, for
the tests of the process topologies and the benchmarks of several web processes: its programs'
pids, and whether a URL answers."""

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.processes import ROOT

BIN = Path(sys.executable).parent


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass(frozen=True)
class Supervisord:
    conf: Path
    process: subprocess.Popen

    def pid(self, program: str) -> int:
        """The program's pid; 0 while it is not running."""
        command = [BIN / "supervisorctl", "-c", self.conf, "pid", program]
        result = subprocess.run(command, capture_output=True, text=True, timeout=30)
        return int(result.stdout.strip() or 0)


@dataclass(frozen=True)
class Site:
    """The product supervisord serves at `base`."""

    base: str
    supervisor: Supervisord

    @property
    def ws_url(self) -> str:
        return self.base.replace("http://", "ws://") + "/ws/chat/"


@contextmanager
def supervisord_running(conf: Path, env: dict[str, str], log: Path) -> Iterator[Supervisord]:
    """supervisord with `conf` and `env` (the venv's programs first on PATH), its output and its
    programs' in `log`; stopped on the way out as Ctrl-C stops `make run`."""
    env = {**env, "PATH": f"{BIN}:{env['PATH']}"}
    with open(log, "w") as output:
        process = subprocess.Popen(
            [BIN / "supervisord", "-c", conf], cwd=ROOT, env=env, stdout=output, stderr=output
        )
    try:
        yield Supervisord(conf, process)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)

"""The engine's supervisor, what `runinference` runs: it keeps one engine serving, starting a
server that dies or fails to start again after a delay that doubles, and tells each state
(starting and its step, serving, restarting) to its caller, which publishes it (enginehost.state)."""

import signal
import time
from collections.abc import Callable
from typing import IO

from enginehost.launcher import EngineConfig, EngineProcess, EngineStartError


def exit_reason(code: int) -> str:
    """How a process ended, in words: `killed by SIGKILL`, `exited with status 1`."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class EngineSupervisor:
    """Keeps one engine serving: a server that dies, or fails to start, is started again after
    a delay that doubles up to RESTART_DELAY_MAX, and each restart is logged with its reason.
    The delay starts over once a server has served for STEADY_AFTER seconds.

    Why here and not only in the process manager: the inference process is the parent of
    vLLM's server, and an out-of-memory kill takes the server, not its parent. Restarting the
    server in place keeps the engine's address and start-up checks in one place, and the
    process manager (supervisord, Kubernetes) still restarts `runinference` itself if it dies.
    A configuration mistake (EngineStartError from start()) is not retried: it would fail the same way.
    """

    RESTART_DELAY_FIRST = 1.0
    RESTART_DELAY_MAX = 30.0
    STEADY_AFTER = 60.0

    def __init__(
        self,
        config: EngineConfig,
        startup_timeout: float,
        log: Callable[[str], None],
        output: IO[str] | None = None,
        on_state: Callable[[str, str], None] = lambda state, detail: None,
    ) -> None:
        self.config = config
        self.startup_timeout = startup_timeout
        self.log = log
        self.output = output
        # Told (state, detail) as the engine goes: starting (with its step), serving, restarting.
        self.on_state = on_state
        self.engine: EngineProcess | None = None
        self.starts = 0

    def run(self, until: Callable[[], bool] = lambda: False) -> None:
        """Serve until `until()` is true after a server ended, or an exception (a signal) ends it;
        the current server is stopped on the way out either way."""
        delay = self.RESTART_DELAY_FIRST
        try:
            while True:
                started = time.monotonic()
                self.log(f"The engine stopped: {self._serve_once()}")
                if until():
                    return
                if time.monotonic() - started >= self.STEADY_AFTER:
                    delay = self.RESTART_DELAY_FIRST
                self.log(f"Starting the engine again in {delay:g}s.")
                self.on_state("restarting", f"it stopped and starts again in {delay:g} s")
                time.sleep(delay)
                delay = min(delay * 2, self.RESTART_DELAY_MAX)
        finally:
            if self.engine is not None:
                self.engine.stop()

    def _serve_once(self) -> str:
        """Start a server, wait while it serves, stop what is left of it: why it ended."""
        self.engine = EngineProcess(self.config, output=self.output)
        self.engine.start()
        self.starts += 1
        try:
            self.engine.wait_healthy(
                self.startup_timeout, progress=lambda phase: self.on_state("starting", phase)
            )
            self.log(f"Engine ready at {self.config.url} serving {self.config.served_model_name}")
            self.on_state("serving", "")
            assert self.engine.process is not None
            return exit_reason(self.engine.process.wait())
        except EngineStartError as exc:
            return str(exc)
        finally:
            self.engine.stop()

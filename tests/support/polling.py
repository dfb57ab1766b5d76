"""Watching a web process from outside while a test hurts something else."""

import threading

import httpx


class HealthPoller:
    """Asks a web process's /healthz every 200 ms in a thread: every answer, and every failure to answer."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.statuses: list[dict] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.wait(0.2):
                try:
                    self.statuses.append(client.get(self.base + "/healthz").json())
                except (httpx.HTTPError, ValueError) as exc:
                    self.failures.append(repr(exc))

    def __enter__(self) -> "HealthPoller":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()

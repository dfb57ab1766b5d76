"""One Chromium for the whole test session, in a process of its own.

Playwright launches Debian's Chromium there, with its usual switches and the suite's flags, and
opens the DevTools protocol on a local port; each test module's Playwright connects to it over
that port (`connect_over_cdp`). The Playwright client cannot live for the session in the test
process (its sync API marks an event loop running in the test's thread for as long as it is
open, which breaks the asyncio tests that follow), but the browser can: launched once, and each
test gets a fresh context of it (its own cookies, storage and cache).

Run as a module, this is that process: `python -m tests.support.chromium EXECUTABLE PORT` prints
`ready` once the browser listens, and closes it when its standard input closes."""

import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.browser import BROWSER_ARGS

READY = "ready"


class SharedChromium:
    """The session's Chromium: `endpoint` is where a Playwright connects to it."""

    def __init__(self, executable: str, port: int, root: Path, log: Path) -> None:
        self.executable = executable
        self.endpoint = f"http://127.0.0.1:{port}"
        self.port = port
        self.root = root
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.chromium", self.executable, str(self.port)],
                cwd=self.root,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        line = self.process.stdout.readline().strip()
        if line != READY:
            self.stop()
            raise RuntimeError(f"Chromium did not start: {line!r}; see {self.log}")

    def running(self) -> str:
        """The endpoint, once the browser answers there: started (again, if it has ended: a
        crash one module saw is not every later module's)."""
        if not self._answers():
            self.stop()
            self.start()
        return self.endpoint

    def _answers(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            return False
        try:
            return httpx.get(self.endpoint + "/json/version", timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        if not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def serve(executable: str, port: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=[*BROWSER_ARGS, f"--remote-debugging-port={port}"]
        )
        print(READY, flush=True)
        sys.stdin.read()
        browser.close()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))

"""The web process as the Procfile starts it: daphne on uvloop's event loop, listening with a long
accept queue (chatsite/daphne.py)."""

import pprint
import subprocess
import sys

import psutil

from harness.processes import ROOT

# The module of the loop daphne's server builds when imported after the entry point's choice.
LOOP_OF_DAPHNE = (
    "import chatsite.daphne as d; d.use_event_loop(); "
    "import daphne.server as s; print(type(s.twisted_loop).__module__)"
)


def loop_module(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LOOP_OF_DAPHNE],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_running_web_process_relays_on_uvloop(product_daphne):
    # The daphne this suite serves the product with, started as the Procfile starts it.
    assert any("chatsite.daphne" in part for part in product_daphne.process.args)
    libraries = {mapped.path for mapped in psutil.Process(product_daphne.process.pid).memory_maps()}
    assert any("/uvloop/" in path for path in libraries), sorted(libraries)


def test_daphne_builds_its_loop_of_the_configured_kind():
    assert loop_module().stdout.strip() == "uvloop"
    assert loop_module(WEB_EVENT_LOOP="asyncio").stdout.strip() == "asyncio.unix_events"
    refused = loop_module(WEB_EVENT_LOOP="trio")
    assert refused.returncode != 0 and "WEB_EVENT_LOOP='trio': expected one of" in refused.stderr


def test_the_running_web_process_listens_with_a_long_accept_queue(product_daphne):
    """Twisted's default of 50 drops the connections of a reconnect storm; for a listening socket
    `ss` shows the queue's length as its Send-Q."""
    port = product_daphne.url.rsplit(":", 1)[1]
    listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
    somaxconn = int(open("/proc/sys/net/core/somaxconn").read())
    assert int(listening.split()[2]) == min(4096, somaxconn), listening


def test_a_sockets_options_are_pretty_printed_only_for_a_line_that_is_logged():
    from chatsite.daphne import Formatted

    class Counted:
        made = 0

        def __repr__(self) -> str:
            Counted.made += 1
            return "counted"

    options = [("autoPingInterval", Counted(), "WebSocketServerFactory")]
    attrs = Formatted(options)
    assert Counted.made == 0
    assert f"\n{attrs}" == "\n" + pprint.pformat(options) and Counted.made == 2

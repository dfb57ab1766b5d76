"""`make run`'s web processes share one listening socket that supervisord opens and keeps
(deploy/supervisor.py), so a restart of one, as `make restart` does it, costs a reader nothing but
one reconnect: the process that keeps serving accepts it at its first try and continues the answer
the restarted one handed over. Real daphne processes, supervisord, Redis and the engine."""

import os
import threading
from pathlib import Path

import psutil
import pytest

from deploy.supervisor import Topology
from harness.processes import free_port
from tests.chat.test_answer_takeover_end_to_end import Reader, owner_pid, restart, supervised_site, user

pytestmark = pytest.mark.django_db(transaction=True)
PROGRAMS = ("web:web-0", "web:web-1")


@pytest.fixture(scope="module")
def shared(django_db_setup, engine_url, tmp_path_factory):
    topology = Topology(["web"], web_port=free_port(), web_processes=2)
    with supervised_site(engine_url, tmp_path_factory.mktemp("shared"), topology) as site:
        yield site


def sockets_of(pid: int) -> set[str]:
    """The sockets a process holds open, by inode."""
    return {
        link for fd in Path(f"/proc/{pid}/fd").iterdir() if (link := os.readlink(fd)).startswith("socket:")
    }


def test_both_processes_accept_from_the_one_socket_supervisord_holds(shared):
    port = int(shared.base.rsplit(":", 1)[1])
    listening = {c.laddr.port: c for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert port in listening
    held = [sockets_of(shared.supervisor.pid(p)) for p in PROGRAMS]
    supervisord = sockets_of(shared.supervisor.process.pid)
    # One listening socket, the supervisor's, open in each web process; neither binds one of its own.
    shared_sockets = held[0] & held[1] & supervisord
    assert len(shared_sockets) == 1, (held, supervisord)
    assert (
        len(
            [
                c
                for c in psutil.net_connections("tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr.port == port
            ]
        )
        == 1
    )


def test_restarting_the_process_that_streams_an_answer_costs_its_reader_one_reconnect(shared):
    reader = Reader(shared.ws_url, shared.base, user("ros")).ask(
        "Write a long story about rivers.", tokens=400
    )
    reader.until_shown(5)
    owner = owner_pid(shared, reader.message)
    [restarted] = [p for p in PROGRAMS if shared.supervisor.pid(p) == owner]
    [staying] = [p for p in PROGRAMS if p != restarted]
    staying_pid = shared.supervisor.pid(staying)
    restarting = threading.Thread(target=restart, args=(shared.supervisor, restarted))
    restarting.start()
    reader.follow()
    restarting.join()
    reader.check()
    # Continued by the process that kept serving, reached at the reader's first try: never refused.
    assert owner_pid(shared, reader.message) == staying_pid
    assert reader.reconnects == 1
    assert shared.supervisor.pid(restarted) not in {0, owner}
    print(f"restart of one of two web processes: the reader waited at most {reader.longest_wait():.1f} s")

"""A web process that is asked to stop (SIGTERM: every restart, every rolling deploy) drains:

1. it stops listening and taking new work: its readiness answers 503 (monitoring.health), new
   sockets and new answers are refused, the takeover scan stops;
2. the answers it runs go on for up to WEB_DRAIN_SECONDS, streaming to the sockets it serves;
3. what still runs then is handed over: left in the registry as stale at once, so another web
   process (or this one's successor) continues it within CHAT_TAKEOVER_SCAN_SECONDS;
4. the process exits.

Meanwhile its idle sockets are sent away, spread out (chat.sockets.send_away).

supervisord's stopwaitsecs, Kubernetes' terminationGracePeriodSeconds and its preStop wait are
set from the same drain time (deploy/). chatsite.daphne wires the signal to `drain`.
"""

import asyncio
import logging
import time

from answers.process import RUNNING, begin_draining, draining

__all__ = ["drain", "draining"]
log = logging.getLogger(__name__)


async def drain(seconds: float) -> None:
    """Let this process's answers finish for up to `seconds`, then hand over the rest."""
    begin_draining()
    deadline = time.monotonic() + seconds
    log.info("draining: %s answers running, %.0f s to finish them", len(RUNNING), seconds)
    while RUNNING and time.monotonic() < deadline:
        await asyncio.wait([g.task for g in RUNNING.values()], timeout=deadline - time.monotonic())
    leaving = list(RUNNING.values())
    for run in leaving:
        # A chat answer goes on elsewhere; an API answer's one reader is a connection to this process.
        run.stop("handover" if run.continuable else "draining")
    if leaving:
        await asyncio.gather(*(run.task for run in leaving), return_exceptions=True)
        log.info("draining: handed over or ended %s answers", len(leaving))

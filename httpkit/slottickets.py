"""A refused socket's slot, as a ticket any web process of the fleet honours.

A slot (httpkit.retryslots) is only a promise if the process the client returns to keeps it: after
a restart the returning sockets land on whichever process the kernel hands them to, one that may
have measured a different rate, started since, or be full again of fresh work. The refusal
therefore carries its slot signed (`issue`), the page opens its next socket with it (`?slot=` on
the socket's URL, static/frontend/connection.js), and a process at its pending bound still takes a
socket whose ticket is due (`due`), up to a hard ceiling above the bound: a socket refused once is
not refused again for the same storm. Slots are handed out at a share of the measured rate, so what
the tickets add past the bound stays small; the ceiling holds it however wrong the rate was.

A ticket is the slot's time and Django's salted HMAC of it with a secret the fleet shares (SECRET_KEY).
It is valid from a moment before its slot until `late` after it; it names no user, and one used
twice only lets a client past the bound twice within that window, under the ceiling.
"""

import hmac
import time
from collections.abc import Callable

from django.utils.crypto import salted_hmac


class SlotTickets:
    def __init__(
        self,
        secret: str | bytes,
        *,
        early: float = 1.0,
        late: float = 30.0,
        clock: Callable[[], float] = time.time,
    ):
        self.secret = secret
        self.early = early  # a client's timer may fire a little early, and rounding shortens waits
        self.late = late  # a page in a background tab, or a slow network, comes back late
        self.clock = clock

    def issue(self, wait: float) -> str:
        """The ticket for a slot `wait` seconds from now."""
        at = str(int((self.clock() + wait) * 1000))
        return f"{at}.{self._mac(at)}"

    def due(self, ticket: str) -> bool:
        """Whether `ticket` is one of the fleet's and its slot has come and not long passed."""
        at, _, mac = ticket.partition(".")
        if not (at.isdigit() and len(at) <= 15 and hmac.compare_digest(mac, self._mac(at))):
            return False
        late = self.clock() - int(at) / 1000
        return -self.early <= late <= self.late

    def _mac(self, at: str) -> str:
        return salted_hmac(__name__, at, secret=self.secret, algorithm="sha256").hexdigest()[:24]

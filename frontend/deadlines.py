"""An answer's time limits: its first token, the gap between two tokens, and the whole answer.

One `Deadlines` per answer gives the moment the next token is due, whichever limit comes
first, and remembers which limit that is, so the timeout that fires can say which one.
"""

from django.conf import settings

NOTES = {
    "timeout_first_token": "The engine sent no first token within {:g} s.",
    "timeout_between_tokens": "The engine sent no token for {:g} s.",
    "timeout_total": "The answer took longer than {:g} s.",
}


class AnswerTimeout(Exception):
    """An answer ran past one of its limits; `code` names it (docs/protocol.md)."""

    def __init__(self, code: str, seconds: float):
        super().__init__(code)
        self.code = code
        self.detail = NOTES[code].format(seconds)


class Deadlines:
    def __init__(self, started: float) -> None:
        self._total = started + settings.CHAT_TOTAL_TIMEOUT
        self.expiring = "timeout_first_token"

    def first_token(self, now: float) -> float:
        """When the first token is due, counted from `now` (the request leaving)."""
        return self._next(now, settings.CHAT_FIRST_TOKEN_TIMEOUT, "timeout_first_token")

    def next_token(self, now: float) -> float:
        """When the token after one that arrived at `now` is due."""
        return self._next(now, settings.CHAT_TOKEN_TIMEOUT, "timeout_between_tokens")

    def expired(self) -> AnswerTimeout:
        """The timeout of the limit that was nearest when the deadline passed."""
        seconds = {
            "timeout_first_token": settings.CHAT_FIRST_TOKEN_TIMEOUT,
            "timeout_between_tokens": settings.CHAT_TOKEN_TIMEOUT,
            "timeout_total": settings.CHAT_TOTAL_TIMEOUT,
        }[self.expiring]
        return AnswerTimeout(self.expiring, seconds)

    def _next(self, now: float, wait: float, code: str) -> float:
        deadline = min(now + wait, self._total)
        self.expiring = code if deadline < self._total else "timeout_total"
        return deadline

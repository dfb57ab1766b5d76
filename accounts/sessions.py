"""Django's database sessions (SESSION_ENGINE), remembering the expiry date their one read found.

A chat socket closes when its session expires (chat.socket_auth). The handshake already reads
the session's row to find its user; keeping that row's `expire_date` spares every socket a second
read of the same row through the web process's one database thread.
"""

from django.contrib.sessions.backends import db


class SessionStore(db.SessionStore):
    # The stored expiry of the row last read; None until a read found one.
    expire_date = None

    def _get_session_from_db(self):
        stored = super()._get_session_from_db()
        self.expire_date = stored.expire_date if stored is not None else None
        return stored

    async def _aget_session_from_db(self):
        stored = await super()._aget_session_from_db()
        self.expire_date = stored.expire_date if stored is not None else None
        return stored

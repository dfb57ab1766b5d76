"""Every Redis key, channel and rate-limit namespace the product uses.

chat:  written by the web tier (chat/); the bulk runner reads CHAT_ACTIVE to give way.
web:  written and read by every web process (chatsite.asgi).
inference:  written by the engine's supervisor (runinference), read by the web tier.
jobs:  written and read by bulk job runners (jobs/).
monitoring:  the dashboard's history, written by a Celery task beat queues (monitoring.history).
sso:  back-channel logout tokens and SAML assertions already taken (sso.backchannel, sso.saml).
Rate limits are kept by the `limits` package under its own prefix, in these namespaces.
"""

import hashlib

# Leases of the answers generating now, scored by expiry (answers.admission).
CHAT_ACTIVE = "chat:generations:active"
# Every answer's stop channel (chat_stop_channel), as a pattern: one subscription of a web
# process hears them all (answers.watcher).
CHAT_STOP_CHANNELS = "chat:stop:*"
# Logouts and user changes, for the chat sockets of every web process (chat.sockets).
CHAT_SOCKET_NOTICES = "chat:sockets:notices"
# Every running answer, scored by its owner's last heartbeat (answers.ownership).
CHAT_ANSWERS = "chat:answers"
# Per-minute chat message windows, per user id (answers.admission).
CHAT_MESSAGES_LIMIT = "chat-messages"
# Changes to conversations (create, rename, delete, settings), per user id (chat.rates).
CHAT_CHANGES_LIMIT = "chat-changes"
# Uploads to collections and searches of them, per user id (knowledge.rates).
KNOWLEDGE_UPLOADS_LIMIT = "knowledge-uploads"
KNOWLEDGE_SEARCHES_LIMIT = "knowledge-searches"
# The rate the web processes were last measured to take handshakes and requests at, a second: a
# process started into a reconnect storm hands out its first retry slots at it (chatsite.asgi).
WEB_PENDING_RATE = "web:pending:rate"
# Failed logins, per username hash and per address (accounts.throttle).
LOGIN_FAILURES_LIMIT = "login-failures"
# Each bulk runner's requests in flight, one key per runner (jobs.shaping).
BULK_INFLIGHT_PREFIX = "jobs:bulk:inflight:"
# The dashboard's points of the last 15 minutes, scored by time; the raw snapshot the newest was
# measured from; the lock that keeps one writer per site (monitoring.history).
MONITORING_HISTORY = "monitoring:history"
MONITORING_HISTORY_LAST = "monitoring:history:last"
MONITORING_HISTORY_WRITER = "monitoring:history:writer"


def chat_user_generations(user_id: int) -> str:
    """The user's share of CHAT_ACTIVE."""
    return f"chat:generations:user:{user_id}"


def chat_user_document_reads(user_id: int) -> str:
    """How many of the user's attachments are being read now (chat.documents)."""
    return f"chat:document-reads:user:{user_id}"


def chat_user_sockets(user_id: int) -> str:
    """Leases of the user's open chat sockets, scored by expiry (chat.rates)."""
    return f"chat:sockets:user:{user_id}"


def engine_state(url: str) -> str:
    """What the engine at `url` is doing, as its supervisor says (enginehost.state writes it,
    inference.state reads it)."""
    return f"inference:state:{url}"


def chat_stream(message_id: int) -> str:
    """The answer's frames (chat.streams)."""
    return f"chat:stream:{message_id}"


def chat_notice(message_id: int) -> str:
    """Why a running answer makes no tokens for now (chat.generation), for its readers elsewhere."""
    return f"chat:notice:{message_id}"


def chat_answer_owner(answer: int | str) -> str:
    """Who owns a running answer (a chat message's id, or an API answer's): its fencing token, user
    and admission lease (answers.ownership)."""
    return f"chat:owner:{answer}"


def chat_stop_channel(message_id: int) -> str:
    """Pub/sub channel on which any process asks the answer's process to stop it."""
    return f"chat:stop:{message_id}"


def chat_stop_requested(message_id: int) -> str:
    """Set with each stop request, for an answer whose watcher has not subscribed yet."""
    return f"chat:stop-requested:{message_id}"


def job_runner_lock(job_id: int) -> str:
    """Held by the one runner working on the job."""
    return f"jobs:runner:{job_id}"


def knowledge_indexer(collection_id: int) -> str:
    """The one indexing run of a collection at a time (knowledge.indexing), refreshed as it works."""
    return f"knowledge:indexer:{collection_id}"


def sso_logout_token(provider_id: str, jti: str) -> str:
    """A back-channel logout token already taken (sso.backchannel), until it expires."""
    return f"sso:logout-token:{provider_id}:{hashlib.sha256(jti.encode()).hexdigest()}"


def sso_saml_assertion(provider_id: str, assertion_id: str) -> str:
    """A SAML assertion already taken (sso.saml), until it expires."""
    return f"sso:saml-assertion:{provider_id}:{hashlib.sha256(assertion_id.encode()).hexdigest()}"

"""The last resort for an answer whose process died and that nothing continued: the beat
schedule's sweep (chat.tasks) marks it interrupted, with the text its stream holds."""

import time
from datetime import timedelta

import orjson
from django.conf import settings
from django.utils import timezone

import redisconn
from chat import protocol
from conversations import selectors, turns
from redisconn import keys


def messages_interrupt_stale() -> int:
    """Mark as interrupted every answer still 'generating' that no process has owned for
    CHAT_STALE_AFTER_SECONDS, keeping the text its stream holds.

    An answer whose process died is continued by another within seconds (answers.takeover); this
    is the last resort, for one that nothing continued (no web process running, a lost registry).
    Its stored text is what its readers were shown: the text before its stream (a continued
    answer's), and the token frames of its stream."""
    seconds = settings.CHAT_STALE_AFTER_SECONDS
    cutoff, stale = timezone.now() - timedelta(seconds=seconds), time.time() - seconds
    candidates = selectors.answers_generating(started_before=cutoff)
    if not candidates:
        return 0
    r = redisconn.sync_client()
    beats = r.zmscore(keys.CHAT_ANSWERS, [str(pk) for pk in candidates])
    dead = [pk for pk, beat in zip(candidates, beats, strict=True) if beat is None or beat < stale]
    interrupted = 0
    for pk in dead:
        frames = [orjson.loads(fields[b"frame"]) for _, fields in r.xrange(keys.chat_stream(pk))[1:]]
        interrupted += turns.message_interrupt(
            message_id=pk,
            streamed=protocol.text_of(frames),
            note="The web process generating this answer stopped before it finished.",
        )
    return interrupted

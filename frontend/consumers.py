"""The chat WebSocket: parse and check each frame, call a service, send frames.

Protocol: docs/protocol.md. Generation runs in `frontend.generation`, one task per
answer, so this consumer keeps receiving (stop, new messages) while tokens flow.
"""

import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from frontend import selectors, services
from frontend.generation import Generation
from inference.engine import engine_client

log = logging.getLogger(__name__)


class FrameError(Exception):
    def __init__(self, code: str, detail: str, **extra):
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.extra = extra


def _id_field(frame: dict, name: str, *, nullable: bool = False) -> int | None:
    if name not in frame:
        raise FrameError("invalid_field", f"'{name}' is required")
    value = frame[name]
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FrameError("invalid_field", f"'{name}' must be a positive integer id")
    return value


class ChatConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        """Accept logged-in users only; anyone else is refused at the handshake."""
        self.user = self.scope.get("user")
        if self.user is None or not self.user.is_authenticated:
            await self.close()
            return
        self.generations: dict[int, Generation] = {}
        await self.accept()

    async def disconnect(self, code: int) -> None:
        """Stop this connection's generations and wait until each has stored its answer."""
        for generation in list(getattr(self, "generations", {}).values()):
            generation.stop("disconnect")
            try:
                await generation.task
            except BaseException:  # noqa: BLE001 - the task's own outcome is already recorded
                pass

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Decode one frame and dispatch it by type ("chat.send" -> chat_send)."""
        try:
            frame = self._decode(text_data, bytes_data)
            handler = {"chat.send": self.chat_send, "chat.stop": self.chat_stop}.get(frame["type"])
            if handler is None:
                raise FrameError("unknown_type", f"unknown frame type {frame['type']!r}")
            await handler(frame)
        except FrameError as exc:
            await self.send_json({"type": "chat.error", "code": exc.code, "detail": exc.detail, **exc.extra})

    def _decode(self, text_data: str | None, bytes_data: bytes | None) -> dict:
        if text_data is None:
            raise FrameError("binary_frame", "frames must be JSON text")
        if len(text_data) > settings.CHAT_MAX_CONTENT_CHARS * 2 + 1024:
            raise FrameError("too_large", "frame too large")
        try:
            frame = json.loads(text_data)
        except json.JSONDecodeError as exc:
            raise FrameError("invalid_json", f"invalid JSON: {exc.msg}") from None
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            raise FrameError("invalid_frame", "a frame is a JSON object with a string 'type'")
        return frame

    async def chat_send(self, frame: dict) -> None:
        """Store the user's message, announce the answer, and start generating it."""
        conversation_id = _id_field(frame, "conversation", nullable=True)
        content = frame.get("content")
        if not isinstance(content, str) or not content.strip():
            raise FrameError("invalid_field", "'content' must be a non-empty string")
        if len(content) > settings.CHAT_MAX_CONTENT_CHARS:
            raise FrameError(
                "too_large", f"'content' is longer than {settings.CHAT_MAX_CONTENT_CHARS} characters"
            )
        if any(g.turn.conversation_id == conversation_id for g in self.generations.values()):
            raise FrameError(
                "conversation_busy",
                "an answer is still being generated in this conversation",
                conversation=conversation_id,
            )
        try:
            turn = await database_sync_to_async(services.chat_turn_start)(
                user=self.user, conversation_id=conversation_id, content=content
            )
        except services.NotFound:
            raise FrameError("not_found", "no such conversation", conversation=conversation_id) from None
        await self.send_json(
            {
                "type": "chat.started",
                "conversation": turn.conversation_id,
                "message": turn.assistant_message_id,
                "user_message": turn.user_message_id,
            }
        )
        generation = Generation(turn, user_id=self.user.pk, engine=engine_client(), send=self.send_json)
        self.generations[generation.message_id] = generation
        generation.start().add_done_callback(lambda _: self.generations.pop(generation.message_id, None))

    async def chat_stop(self, frame: dict) -> None:
        """Stop an answer this connection is generating; the partial text is kept."""
        message_id = _id_field(frame, "message")
        generation = self.generations.get(message_id)
        if generation is not None:
            generation.stop("user")
            return
        message = await database_sync_to_async(selectors.message_get)(user=self.user, message_id=message_id)
        if message is None:
            raise FrameError("not_found", "no such message", message=message_id)
        raise FrameError("not_running", "that answer is not being generated here", message=message_id)

    async def send_json(self, content: dict) -> None:
        await self.send(text_data=json.dumps(content))

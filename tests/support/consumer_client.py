"""Helpers for driving the chat consumer in-process with Channels' WebsocketCommunicator."""

from channels.testing import WebsocketCommunicator

from chat.consumers import ChatConsumer


async def connected(user) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
    communicator.scope["user"] = user
    ok, _ = await communicator.connect()
    assert ok
    return communicator


async def until_closed(communicator) -> list[dict]:
    """Frames up to and including the answer's closing chat.done or chat.error."""
    frames = [await communicator.receive_json_from(timeout=10)]
    while frames[-1]["type"] not in {"chat.done", "chat.error"}:
        frames.append(await communicator.receive_json_from(timeout=10))
    return frames


async def first_frames(frames, count: int):
    """The first `count` frames of an answer's stream, as they are written."""
    async for frame in frames:
        yield frame
        count -= 1
        if not count:
            return

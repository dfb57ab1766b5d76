"""Helpers for driving the chat consumer in-process with Channels' WebsocketCommunicator."""

from channels.testing import WebsocketCommunicator

from chat.consumers import ChatConsumer
from httpkit import websocket


class QueuedSocket:
    """A direct sender (httpkit.websocket) whose frames join the communicator's output, where
    Channels' sends put theirs: `sent` counts them."""

    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self._output = communicator.output_queue
        self.sent = 0

    def send(self, data: bytes) -> None:
        self._output.put_nowait({"type": "websocket.send", "text": data.decode()})
        self.sent += 1


async def connected(user, *, direct: bool = False) -> WebsocketCommunicator:
    """A chat socket of `user`; with `direct`, its scope gives the consumer a QueuedSocket
    (`communicator.direct`) as daphne gives a DirectSocket."""
    communicator = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
    communicator.scope["user"] = user
    if direct:
        communicator.direct = QueuedSocket(communicator)
        communicator.scope["extensions"] = {websocket.EXTENSION: communicator.direct}
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

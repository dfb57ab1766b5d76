"""A WebSocket's text frames written straight to its connection, past the ASGI `send`.

A frame an application sends goes through each middleware's `send`, the server's reply dispatch and
autobahn's message framing, and then waits in twisted's buffer for the event loop's next turn. The
chat's token frames go to sockets thousands of times a second per process, already encoded: the
server (chatsite.daphne) puts a `DirectSocket` for the connection in its scope's extensions, and a
frame sent through it is framed here and written to the TCP socket at once, while nothing else waits
to be written on it (otherwise after what waits, in order). What it cannot frame itself (a compressed
connection, a frame of 64 KiB or more, one whose connection is mid-message) goes through autobahn.
"""

from autobahn.exception import Disconnected
from autobahn.websocket.protocol import WebSocketProtocol

# The name of the extension in an ASGI scope.
EXTENSION = "chat.direct_send"
# Frames from this size on go through autobahn (its size limit, its fragmenting).
LARGE = 1 << 16


def direct(scope: dict) -> "DirectSocket | None":
    """The connection's direct sender, where its server gives one."""
    return (scope.get("extensions") or {}).get(EXTENSION)


def waiting_bytes(transport) -> int:
    """What a twisted transport holds that the client has not read yet (0 when it cannot tell)."""
    data = getattr(transport, "dataBuffer", b"")
    return len(data) - getattr(transport, "offset", 0) + getattr(transport, "_tempDataLen", 0)


def text_frame(data: bytes) -> bytes:
    """`data` as one unmasked, final text frame (RFC 6455, 5.2), under LARGE bytes."""
    size = len(data)
    if size < 126:
        return b"\x81" + bytes((size,)) + data
    return b"\x81\x7e" + size.to_bytes(2, "big") + data


class DirectSocket:
    """Sends text frames on one server-side autobahn WebSocket connection."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: WebSocketProtocol) -> None:
        self._protocol = protocol

    def send(self, data: bytes) -> None:
        """Send `data` (UTF-8 text) as one frame now; Disconnected when the connection is not open."""
        protocol = self._protocol
        if protocol.state != WebSocketProtocol.STATE_OPEN:
            raise Disconnected("Attempt to send on a closed protocol")
        if (
            len(data) >= LARGE
            or protocol._perMessageCompress is not None
            or protocol.send_state != WebSocketProtocol.SEND_STATE_GROUND
            or protocol.send_queue
        ):
            protocol.sendMessage(data)
            return
        write(protocol.transport, text_frame(data))


def write(transport, data: bytes) -> None:
    """Write `data` to a twisted TCP transport: to its socket now, as much as the kernel takes, when
    nothing waits before it; the rest (or all, on any other transport) through the transport's buffer."""
    sock = getattr(transport, "socket", None)
    if (
        sock is not None
        and transport.connected
        and not transport.disconnecting
        and not getattr(transport, "TLS", False)
        and waiting_bytes(transport) == 0
    ):
        try:
            sent = sock.send(data)
        except OSError:  # full, or failed: the transport's own write finds out which, as ever
            sent = 0
        if sent == len(data):
            return
        data = data[sent:]
    transport.write(data)

"""A WebSocket frame written straight to its connection (httpkit.websocket): to the socket at once
when nothing waits before it, after what waits otherwise, and what the kernel does not take left to
the transport, in order."""

import socket

from httpkit.websocket import text_frame, write


class Transport:
    """What `write` reads of twisted's TCP transport, its buffer kept in `buffered`."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self.connected, self.disconnecting = True, False
        self.dataBuffer, self.offset, self._tempDataLen = b"", 0, 0
        self.buffered = b""

    def write(self, data: bytes) -> None:
        self.buffered += data
        self._tempDataLen += len(data)


def pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.settimeout(5)
    return ours, theirs


def test_a_frame_with_nothing_waiting_before_it_goes_to_the_socket_at_once():
    ours, theirs = pair()
    transport = Transport(ours)
    write(transport, text_frame(b'{"seq":1}'))
    assert theirs.recv(100) == b"\x81\x09" + b'{"seq":1}'
    assert transport.buffered == b""


def test_a_frame_goes_after_what_waits_in_the_transport():
    ours, theirs = pair()
    transport = Transport(ours)
    transport.write(b"earlier")
    write(transport, text_frame(b"later"))
    assert transport.buffered == b"earlier" + b"\x81\x05later"
    theirs.settimeout(0.2)
    try:
        got = theirs.recv(100)
    except TimeoutError:
        got = b""
    assert got == b""


def test_what_the_kernel_does_not_take_is_left_to_the_transport_in_order():
    ours, theirs = pair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport = Transport(ours)
    frame = text_frame(bytes(range(256)) * 200)
    write(transport, frame)
    assert 0 < len(transport.buffered) < len(frame)
    received = b""
    while len(received) < len(frame) - len(transport.buffered):
        received += theirs.recv(65536)
    assert received + transport.buffered == frame

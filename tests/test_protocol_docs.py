"""docs/protocol.md and frontend/protocol.py say the same: every frame type and error code."""

import re
from pathlib import Path

import pytest

from frontend import protocol
from frontend.consumers import ChatConsumer

DOC = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()


def first_column(heading: str) -> list[str]:
    """The backticked names in the first column of the table under `## heading`."""
    section = DOC.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`([a-z_.]+)`", row.split("|")[1])]


def test_it_documents_exactly_the_frames_a_client_may_send_and_the_consumer_handles_each():
    assert first_column("Client → server") == list(protocol.CLIENT_FRAMES)
    for frame_type in protocol.CLIENT_FRAMES:
        assert callable(getattr(ChatConsumer, frame_type.replace(".", "_"), None)), frame_type


def test_it_documents_exactly_the_frames_the_server_sends():
    assert first_column("Server → client") == list(protocol.SERVER_FRAMES)


def test_it_documents_every_error_code_and_no_other():
    assert sorted(first_column("Error codes")) == sorted(protocol.ERRORS)


def test_it_refuses_an_undocumented_code():
    with pytest.raises(ValueError, match="made_up"):
        protocol.Refusal("made_up", "nothing")

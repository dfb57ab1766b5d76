"""docs/protocol.md says what the code does: every frame type (chat/protocol.py) and every error
code of every surface, with its status and OpenAI type and code (httpkit/errors.py)."""

import re
from pathlib import Path

import pytest

from chat import protocol
from chat.consumers import ChatConsumer
from httpkit.errors import ERRORS, ErrorCode, Refusal

DOC = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()


def rows(heading: str) -> list[list[str]]:
    """The cells of each row of the table under `## heading`."""
    section = DOC.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in line.split("|")[1:-1]] for line in lines]


def names(cell: str) -> list[str]:
    return re.findall(r"`([a-z_.]+)`", cell)


def first_column(heading: str) -> list[str]:
    """The backticked names in the first column of the table under `## heading`."""
    return [name for row in rows(heading) for name in names(row[0])]


def documented_errors() -> dict[str, ErrorCode]:
    """Each code of the error table, with its status, OpenAI type and OpenAI code as the page says them."""
    documented = {}
    for codes, status, openai_type, openai_code, _ in rows("Error codes"):
        for code in names(codes):
            assert code not in documented, f"{code} is documented twice"
            documented[code] = ErrorCode(int(status), *names(openai_type), *(names(openai_code) or [None]))
    return documented


def test_it_documents_exactly_the_frames_a_client_may_send_and_the_consumer_handles_each():
    assert first_column("Client → server") == list(protocol.CLIENT_FRAMES)
    for frame_type in protocol.CLIENT_FRAMES:
        assert callable(getattr(ChatConsumer, frame_type.replace(".", "_"), None)), frame_type


def test_it_documents_exactly_the_frames_the_server_sends():
    assert first_column("Server → client") == list(protocol.SERVER_FRAMES)


def test_it_documents_every_error_code_as_the_code_answers_it_and_no_other():
    documented = documented_errors()
    assert sorted(documented) == sorted(ERRORS)
    for code, row in ERRORS.items():
        assert documented[code] == row, code


def test_it_refuses_an_undocumented_code():
    with pytest.raises(ValueError, match="made_up"):
        Refusal("made_up", "nothing")

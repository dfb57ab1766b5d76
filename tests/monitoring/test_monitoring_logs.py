"""Log records carry request, conversation and message ids, in plain and JSON formats."""

import asyncio
import io
import json
import logging

import pytest
from django.conf import settings

from logcontext import ContextFilter, JsonFormatter, PlainFormatter, bind_log_context


def capture(formatter: logging.Formatter) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(formatter)
    logger = logging.getLogger(f"test.logcontext.{id(stream)}")
    logger.handlers = [handler]
    logger.propagate = False
    return logger, stream


def test_it_puts_the_ids_of_each_task_on_its_records_as_json():
    logger, stream = capture(JsonFormatter())

    async def answer(message_id: int) -> None:
        bind_log_context(request_id=f"chat-{message_id}", conversation_id=7, message_id=message_id)
        await asyncio.sleep(0)
        logger.warning("answer %s failed", message_id)

    async def both() -> None:
        await asyncio.gather(answer(1), answer(2))

    asyncio.run(both())
    logger.info("outside any answer")
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    by_message = {r["message_id"]: r for r in records if r["message_id"] is not None}
    assert by_message[1]["request_id"] == "chat-1" and by_message[1]["message"] == "answer 1 failed"
    assert by_message[2]["request_id"] == "chat-2" and by_message[2]["conversation_id"] == 7
    assert records[-1]["message_id"] is None and records[-1]["level"] == "INFO"


def test_it_appends_the_ids_to_plain_lines():
    logger, stream = capture(PlainFormatter())

    async def answer() -> None:
        bind_log_context(conversation_id=3, message_id=9)
        logger.warning("slow engine")

    asyncio.run(answer())
    assert stream.getvalue().strip().endswith("slow engine [conversation_id=3 message_id=9]")


def test_it_wires_the_filter_and_formatter_into_the_console_handler():
    console = settings.LOGGING["handlers"]["console"]
    assert console["filters"] == ["log_ids"]
    assert console["formatter"] == settings.LOG_FORMAT
    root = logging.getLogger()
    assert any(isinstance(f, ContextFilter) for h in root.handlers for f in h.filters)


@pytest.mark.django_db
def test_it_gives_each_http_request_an_id_and_keeps_a_plain_caller_id(client):
    generated = client.get("/accounts/login/")["X-Request-Id"]
    assert len(generated) == 32
    assert client.get("/accounts/login/")["X-Request-Id"] != generated
    kept = client.get("/accounts/login/", headers={"X-Request-Id": "lb-1234"})
    assert kept["X-Request-Id"] == "lb-1234"
    forged = client.get("/accounts/login/", headers={"X-Request-Id": "x\nlevel=ERROR"})
    assert forged["X-Request-Id"] != "x\nlevel=ERROR"


def test_it_binds_the_request_id_while_the_view_runs(rf):
    from django.http import HttpResponse

    from logcontext import log_context
    from monitoring.middleware import request_id_middleware

    seen = {}

    def view(request):
        seen.update(log_context())
        return HttpResponse()

    response = request_id_middleware(view)(rf.get("/", headers={"X-Request-Id": "probe-42"}))
    assert seen == {"request_id": "probe-42", "conversation_id": None, "message_id": None}
    assert response["X-Request-Id"] == "probe-42"

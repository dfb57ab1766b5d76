"""A request's body kept out of memory (chatsite.daphne.SpooledBody): given back a chunk at a time,
then the messages after it, as the application asks (Django listens for the disconnect once it has
read the body)."""

import asyncio

from chatsite.daphne import SpooledBody


async def test_it_gives_the_body_back_in_chunks_then_the_disconnect_after_it():
    queue = SpooledBody()
    body = b"x" * (SpooledBody.CHUNK + 10)
    queue.put_nowait({"type": "http.request", "body": body[:100], "more_body": True})
    queue.put_nowait({"type": "http.request", "body": body[100:], "more_body": False})
    chunks = [await queue.get()]
    while chunks[-1]["more_body"]:
        chunks.append(await queue.get())
    assert b"".join(c["body"] for c in chunks) == body and len(chunks) == 2
    queue.put_nowait({"type": "http.disconnect"})
    assert await asyncio.wait_for(queue.get(), 1) == {"type": "http.disconnect"}

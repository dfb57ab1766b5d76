"""The prefix cache serving quoted passages: a question that quotes passages, then a follow-up on the same
passages, in the product's prompt layout (knowledge.context: the block of numbered passages in the user turn
that asked, a later turn citing them by number), straight to the real chat engine with a user's cache salt.
Reports each question's prompt tokens, cached prompt tokens and time to first token. Target: the follow-up
served at least 80% from the prefix cache. The passages are consecutive passages of the benchmark's PDF
text cut by the product's chunker; which passages retrieval picks does not change the layout.
"""

import asyncio

from bench.knowledge_pdf import handbook_pdf

QUESTIONS = [
    ("Who approves purchase orders, and how often?", "And who checks the supplier contracts?"),
    ("When are expense reports reviewed?", "Which of these happen once a quarter?"),
    ("What does the service desk do each Monday?", "Summarise the finance office's duties."),
]
PASSAGES = 6
MAX_TOKENS = 32


def _passages(first: int) -> list:
    from knowledge import chunking
    from knowledge.search import Passage

    text = handbook_pdf().decode("latin-1")
    lines = [part.split(") Tj")[0] for part in text.split("(")[1:] if ") Tj" in part]
    pieces = chunking.pieces(" ".join(lines[first * 40 : first * 40 + 400]))[:PASSAGES]
    return [
        Passage(
            chunk_id=first * 100 + p.position, document_id=1, document="handbook.pdf", collection_id=1,
            position=p.position, page=None, text=p.text, tokens=p.tokens, score=0.0, similarity=None,
        )
        for p in pieces
    ]  # fmt: skip


async def _conversation(engine, index: int, salt: str) -> list[dict]:
    from knowledge import context

    first, follow_up = QUESTIONS[index]
    numbered = context.new_passages(_passages(index * 10), {})
    messages = [{"role": "user", "content": context.user_content(first, numbered, [])}]
    asked = await engine.chat(messages, cache_salt=salt)
    messages += [
        {"role": "assistant", "content": asked.text},
        {"role": "user", "content": context.user_content(follow_up, [], [n for n, _ in numbered])},
    ]
    again = await engine.chat(messages, cache_salt=salt)
    return [
        {
            "question": which,
            "prompt_tokens": answer.prompt_tokens,
            "cached_tokens": answer.cached_tokens,
            "cached_share": round((answer.cached_tokens or 0) / answer.prompt_tokens, 3),
            "ttft_ms": round(answer.ttft * 1000, 1),
        }
        for which, answer in (("first", asked), ("follow-up", again))
    ]


def run_prefix() -> dict:
    from bench.clients import RawEngine
    from bench.processes import engine_config, engine_running
    from inference.isolation import cache_salt

    with engine_running(engine_config(), "engine-knowledge-prefix") as url:
        engine = RawEngine(url, max_tokens=MAX_TOKENS)

        async def every() -> list[dict]:
            rows = []
            for index in range(len(QUESTIONS)):
                rows += await _conversation(engine, index, cache_salt("bench-knowledge", index))
            await engine.close()
            return rows

        rows = asyncio.run(every())
    follow_ups = [row for row in rows if row["question"] == "follow-up"]
    return {
        "passages": PASSAGES,
        "rows": rows,
        "min_follow_up_share": min(r["cached_share"] for r in follow_ups),
    }

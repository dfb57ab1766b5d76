"""Chat beside knowledge ingestion: the chat's between-token p99 and time to first token with an ingestion
running and without, in one run.

The product as `make run` serves it, on a fresh database: Redis, the chat engine (vLLM), the embedding
engine, daphne and a bulk Celery worker. In each phase `--users` chat users ask `--answers` questions
each over the WebSocket, all users at once, each answer in a new conversation and `--tokens` tokens long
by construction (min_tokens = max_tokens); then one more user asks a collection `--questions` short
questions one after another (each embedded, its passages retrieved and quoted). Three phases: without
ingestion; with `--documents` documents of about 500 tokens (bench.knowledge_ingest) being indexed,
measured from the first passage stored; without again once they are ready. Each `--round NICE
WHILE_CHAT` starts the embedding engine at niceness NICE and the worker with
KNOWLEDGE_EMBED_BATCH_WHILE_CHAT=WHILE_CHAT, and runs the three phases (default: one, as configured).
Target: the chat's between-token p99 with ingestion within 50 ms of its value without (both phases
without, pooled).
Run: `python -m bench.bench_knowledge_chat [--round 0 8 --round 0 0] [--documents N] [--users N]`.
"""

import asyncio
import contextlib
import json
import time

from asgiref.sync import sync_to_async

from bench import setup
from bench.clients import Answer, ProductChat
from bench.knowledge_ingest import documents, environment, indexing, stop_redis, upload, watch
from bench.prompts import PROMPTS, SHORT_SYSTEM_PROMPT
from bench.results import arguments, load_during, percentile, save, summarize

# Documents of the collection the question user asks, indexed before the phases.
REFERENCE = 20
QUESTION_TOKENS = 32
TARGET_MS = 50


def _conversation(user, tokens: int, collection_id: int | None = None) -> int:
    from conversations.services import conversation_create
    from knowledge.quotes import conversation_collections_set

    if collection_id is None:
        settings_data = {"max_tokens": tokens, "min_tokens": tokens}
    else:
        settings_data = {"max_tokens": tokens}
    conversation = conversation_create(user=user, settings_data=settings_data)
    if collection_id is not None:
        conversation_collections_set(
            conversation_id=conversation.pk, user=user, collection_ids=[collection_id]
        )
    return conversation.pk


async def _asks(base: str, cookie: str, user, prompts, tokens: int, collection_id: int | None = None) -> list:
    """`prompts` asked in turn, each in a new conversation (retrieving from `collection_id`, if given)."""
    answers: list[Answer] = []
    async with ProductChat(base, cookie) as chat:
        for prompt in prompts:
            chat.conversation = await sync_to_async(_conversation)(user, tokens, collection_id)
            answers.append(await chat.ask(prompt))
    return answers


async def _phase(
    name: str, base: str, people: list, questions: list[str], options, collection_id: int
) -> dict:
    """The chat users' answers, all at once; then the question user's questions, one at a time."""
    *chatters, (asker, asker_cookie) = people
    began = time.perf_counter()
    with load_during() as load:
        chats = await asyncio.gather(
            *(
                _asks(base, cookie, user, _prompts(name, i, options.answers), options.tokens)
                for i, (user, cookie) in enumerate(chatters)
            )
        )
        wall = time.perf_counter() - began
        asked = await _asks(base, asker_cookie, asker, questions, QUESTION_TOKENS, collection_id)
    answers = [answer for answered in chats for answer in answered]
    return {"phase": name, **summarize(answers, wall), **_questions(asked), **load, "answers": answers}


def _prompts(phase: str, user: int, count: int) -> list[str]:
    """Each phase's own prompts, so no phase finds another's in the prefix cache."""
    return [f"{phase.title()} {user}.{j}: {PROMPTS[(user * count + j) % len(PROMPTS)]}" for j in range(count)]


def _questions(asked: list[Answer]) -> dict:
    ttfts = [a.ttft * 1000 for a in asked if a.ttft is not None]
    return {
        "questions": len(asked),
        "question_ttft_p50_ms": round(percentile(ttfts, 50), 1) if ttfts else None,
        "question_ttft_p95_ms": round(percentile(ttfts, 95), 1) if ttfts else None,
        "question_ttft_max_ms": round(max(ttfts), 1) if ttfts else None,
    }


def _round(base: str, engine_url: str, redis, shape: tuple, people: list, texts: list[str], options) -> dict:
    """The three phases with the embedding engine at niceness `nice` and the worker's requests of
    `while_chat` texts while chat streams (`shape`)."""
    from django.contrib.auth import get_user_model

    from knowledge import services

    reference, ingested = texts[:REFERENCE], texts[REFERENCE:]
    asker = people[-1][0]
    # Each phase's own questions: the openings of the reference documents' passages.
    openings = [" ".join(text.split()[start : start + 12]) for text in reference for start in (0, 100, 200)]
    questions = [openings[i::3][: options.questions] for i in range(3)]
    nice, while_chat = shape
    name = f"{nice}-{while_chat}"
    with indexing(
        redis=redis, nice=nice, inference_url=engine_url, KNOWLEDGE_EMBED_BATCH_WHILE_CHAT=str(while_chat)
    ):
        collection = services.collection_create(owner=asker, name=f"Reference {name}")
        upload(collection, reference)
        watch(collection, lambda now: now["ready"] == len(reference), 600, time.perf_counter(), [])
        run = lambda name, qs: asyncio.run(_phase(name, base, people, qs, options, collection.pk))  # noqa: E731
        without = run("without", questions[0])
        owner, _ = get_user_model().objects.get_or_create(username=f"bench-ingest-{name}")
        target = services.collection_create(owner=owner, name=f"Ingestion {name}")
        began = time.perf_counter()
        timeline: list = []
        upload(target, ingested)
        at_start = watch(target, lambda now: now["passages"] > 0, 600, began, timeline)
        during = run("with", questions[1])
        at_end = watch(target, lambda now: True, 1, began, timeline)
        watch(target, lambda now: now["ready"] == len(ingested), 3600, began, timeline)
        ingestion = {
            "documents": len(ingested),
            "ready_when_the_phase_began": at_start["ready"],
            "ready_when_the_phase_ended": at_end["ready"],
            "running_throughout": at_end["ready"] < len(ingested),
            "wall_s": timeline[-1][0],
            "timeline": timeline,
        }
        after = run("without again", questions[2])
    return {
        "embedding_nice": nice,
        "embed_batch_while_chat": while_chat,
        **_compare([without, during, after], ingestion),
    }


def _compare(phases: list[dict], ingestion: dict) -> dict:
    without, during, after = phases
    pooled = summarize(without.pop("answers") + after.pop("answers"), without["wall_s"] + after["wall_s"])
    during.pop("answers")
    added = during["gap_p99_ms"] - pooled["gap_p99_ms"]
    return {
        "phases": phases,
        "without_pooled": pooled,
        "ingestion": ingestion,
        "gap_p99_added_ms": round(added, 1),
        "gap_p99_added_vs_each_ms": [
            round(during["gap_p99_ms"] - phase["gap_p99_ms"], 1) for phase in (without, after)
        ],
        "ttft_p50_added_ms": round(during["ttft_p50_ms"] - pooled["ttft_p50_ms"], 1),
        "question_ttft_p50_added_ms": _added(during, without, after, "question_ttft_p50_ms"),
        "target_met": added <= TARGET_MS,
    }


def _added(during: dict, without: dict, after: dict, key: str) -> float | None:
    base = [phase[key] for phase in (without, after) if phase[key] is not None]
    if during[key] is None or not base:
        return None
    return round(during[key] - sum(base) / len(base), 1)


@contextlib.contextmanager
def _people(count: int):
    """`count` users with their session cookies, the last one the question user."""
    from django.contrib.auth import get_user_model

    from bench.processes import session_cookie

    users = [get_user_model().objects.create_user(f"bench-chat-{i}") for i in range(count)]
    yield [(user, session_cookie(user)) for user in users]


def parser():
    def extra(parser) -> None:
        parser.add_argument("--users", type=int, default=4, help="chat users (one more asks a collection)")
        parser.add_argument("--answers", type=int, default=6, help="answers each chat user asks a phase")
        parser.add_argument("--tokens", type=int, default=160, help="tokens of each chat answer")
        parser.add_argument("--questions", type=int, default=8, help="questions of a collection a phase")
        parser.add_argument("--documents", type=int, default=300, help="documents the ingestion indexes")
        parser.add_argument(
            "--round", type=int, nargs=2, action="append", metavar=("NICE", "WHILE_CHAT"), dest="rounds",
            help="a round: EMBEDDING_NICE and KNOWLEDGE_EMBED_BATCH_WHILE_CHAT (default: as configured)",
        )  # fmt: skip
        parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")

    return arguments(__doc__.splitlines()[0], extra)


def main() -> dict:
    options = parser().parse_args()
    if options.quick:
        options.users, options.answers, options.tokens, options.documents, options.questions = 2, 2, 64, 60, 3
    environment(options.store)
    setup()
    import os

    from django.conf import settings
    from django.core.management import call_command

    from bench.processes import engine_config, engine_process, product_environment, product_process
    from harness.processes import redis_started

    call_command("migrate", verbosity=0)
    texts = documents(REFERENCE + options.documents)
    rounds = []
    redis = redis_started(os.environ["REDIS_URL"])
    try:
        with (
            engine_process(engine_config(), name="knowledge-chat-engine") as (engine_url, _),
            product_process(
                engine_url,
                **product_environment(system_prompt=SHORT_SYSTEM_PROMPT, max_tokens=options.tokens),
            ) as (base, _),
            _people(options.users + 1) as people,
        ):
            default = (settings.EMBEDDING_NICE, settings.KNOWLEDGE_EMBED_BATCH_WHILE_CHAT)
            for shape in options.rounds or [default]:
                rounds.append(_round(base, engine_url, redis, tuple(shape), people, texts, options))
                print(json.dumps({k: v for k, v in rounds[-1].items() if k != "ingestion"}, indent=2))
    finally:
        stop_redis(redis, os.environ["REDIS_URL"])
    result = {
        "benchmark": "knowledge_chat",
        "users": options.users,
        "answers": options.answers,
        "tokens": options.tokens,
        "documents": options.documents,
        "store": options.store,
        "settings": {
            name: getattr(settings, name)
            for name in ("KNOWLEDGE_EMBED_BATCH", "KNOWLEDGE_EMBED_BATCH_WHILE_CHAT", "EMBEDDING_MAX_BATCH")
        },
        "rounds": rounds,
    }
    save(options.output, "knowledge_chat", result)
    return result


if __name__ == "__main__":
    main()

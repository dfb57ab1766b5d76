"""Many chats at once through two web processes, beside a bulk job, on one store: every
turn is stored, none lost, and the job completes.

On the default SQLite store this is the write concurrency `make run` creates: each web
process stores turns and finished answers from its own thread, the bulk worker claims and
finishes documents from its own, and all of them share one file.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile

from conversations.models import Conversation, Message
from documents.uploads import documents_from_files
from jobs import services as jobs
from jobs.models import Job
from tests.support.chat_client import collect_answer, long_answer_conversation, open_chat, send
from tests.support.jobs_corpus import report
from tests.support.jobs_helpers import staff_user, wait_finished
from tests.support.product import running_daphne

pytestmark = pytest.mark.django_db(transaction=True)

USERS = 6
CHATS_PER_USER = 3  # CHAT_MAX_ACTIVE_PER_USER: every chat is admitted
TURNS = 2
ANSWER_TOKENS = 12


def chat(ws_url: str, origin: str, user, conversation: int) -> list[tuple[dict, str, dict]]:
    """TURNS turns of one conversation, each sent when the last answer ended."""
    turns = []
    with open_chat(ws_url, origin, user) as ws:
        for turn in range(TURNS):
            send(ws, {"type": "chat.send", "conversation": conversation, "content": f"Question {turn}?"})
            started, tokens, done = collect_answer(ws, timeout=300)
            turns.append((started, "".join(t["text"] for t in tokens), done))
    return turns


def test_it_stores_every_turn_of_many_concurrent_chats_across_two_web_processes_beside_a_job(
    django_db_setup, engine_url, celery_worker
):
    users = [
        get_user_model().objects.create_user(f"busy-{n}", password="pw-busy-12345") for n in range(USERS)
    ]
    chats = [
        (user, long_answer_conversation(user, max_tokens=ANSWER_TOKENS))
        for user in users
        for _ in range(CHATS_PER_USER)
    ]
    uploads = [SimpleUploadedFile(f"r{i}.txt", report(300 + i).encode()) for i in range(6)]
    with running_daphne(engine_url) as first, running_daphne(engine_url) as second:
        documents = documents_from_files(uploads)
        job = jobs.job_create(owner=staff_user(), documents=documents, max_summary_tokens=16)
        servers = [first.url, second.url]
        with ThreadPoolExecutor(len(chats)) as pool:
            futures = [
                pool.submit(
                    chat,
                    servers[n % 2].replace("http://", "ws://") + "/ws/chat/",
                    servers[n % 2],
                    user,
                    conversation,
                )
                for n, (user, conversation) in enumerate(chats)
            ]
            results = [future.result() for future in futures]
        logs = [server.log.read_text() for server in (first, second)]
    job = wait_finished(job, timeout=300)
    assert job.status == Job.Status.COMPLETED
    logs.append(celery_worker.log_path.read_text())

    for (_, conversation), turns in zip(chats, results, strict=True):
        for started, text, done in turns:
            assert done["type"] == "chat.done", done
            assert (done["status"], done["usage"]["completion_tokens"]) == ("complete", ANSWER_TOKENS)
            assert started["conversation"] == conversation
            stored = Message.objects.get(pk=started["message"])
            assert (stored.status, stored.content) == ("complete", text)
        messages = list(Message.objects.filter(conversation_id=conversation).order_by("created_at", "id"))
        assert [m.role for m in messages] == ["user", "assistant"] * TURNS
        assert [m.content for m in messages[::2]] == [f"Question {n}?" for n in range(TURNS)]
        assert messages[2].parent_id == messages[1].pk
        assert Conversation.objects.get(pk=conversation).current_leaf_id == messages[-1].pk
    assert Message.objects.filter(conversation__owner__in=users).count() == len(chats) * TURNS * 2
    for log in logs:
        assert "database is locked" not in log
        assert "Traceback" not in log

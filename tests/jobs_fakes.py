"""A fault-injecting engine for the job runner's unit tests; end-to-end tests use vLLM.

Words are tokens. A request whose document contains POISON fails like a broken
engine would; `delay` keeps requests in flight long enough to count them.
"""

import asyncio
from collections.abc import AsyncIterator, Sequence

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from inference.client import ChatRequest, Completion, EngineError, EngineLoad, TextDelta
from jobs import services
from jobs.ingest import DocumentInput
from jobs.models import Job


class BulkFakeEngine:
    def __init__(self, *, delay: float = 0.05, poison: str = "POISON", hang: bool = False):
        self.delay = delay
        self.poison = poison
        self.hang = hang
        self.active = 0
        self.peak = 0
        self.aborted = 0
        self.requests: list[ChatRequest] = []
        self._vocab: list[str] = []
        self._ids: dict[str, int] = {}

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[TextDelta | Completion]:
        self.requests.append(request)
        self.active += 1
        self.peak = max(self.peak, self.active)
        finished = False
        try:
            await asyncio.sleep(self.delay)
            if self.hang:
                await asyncio.Event().wait()
            content = request.messages[-1]["content"]
            if self.poison in content:
                raise EngineError("The engine failed (500): boom")
            yield TextDelta(f"Summary of {len(content.split())} words.")
            finished = True
            yield Completion(
                "stop", prompt_tokens=len(content.split()) + 40, cached_tokens=32, completion_tokens=6
            )
        finally:
            self.active -= 1
            if not finished:
                self.aborted += 1

    async def count_prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        return sum(len(m["content"].split()) for m in messages) + 10

    async def tokenize(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in self._ids:
                self._ids[word] = len(self._vocab)
                self._vocab.append(word)
            ids.append(self._ids[word])
        return ids

    async def detokenize(self, token_ids: Sequence[int]) -> str:
        return " ".join(self._vocab[i] for i in token_ids)

    async def load(self) -> EngineLoad:
        return EngineLoad(running=self.active, waiting=0)

    async def is_healthy(self) -> bool:
        return True


def staff_user(username: str = "staff"):
    User = get_user_model()
    user, _ = User.objects.get_or_create(username=username, defaults={"is_staff": True})
    return user


def queued_job(texts: dict[str, str], **kwargs) -> Job:
    """A job ready for a runner, without sending its task to the broker."""
    job = services.job_create(
        owner=staff_user(),
        documents=[DocumentInput(key, text=text) for key, text in texts.items()],
        start=False,
        **kwargs,
    )
    Job.objects.filter(pk=job.pk).update(status=Job.Status.QUEUED)
    return job


aqueued_job = sync_to_async(queued_job)

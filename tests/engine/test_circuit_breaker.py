"""The circuit breaker around the engine client."""

import pytest

from inference.breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker, GuardedEngineClient
from inference.client import ChatRequest, EngineError
from tests.support.fake_engine import FakeEngine


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def drain(client, request) -> None:
    async for _ in client.stream_chat(request):
        pass


REQUEST = ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)


async def test_it_opens_after_consecutive_failures_then_lets_one_probe_through_and_closes_on_success():
    clock, changes = Clock(), []
    breaker = CircuitBreaker(failure_threshold=2, cool_down=10, clock=clock, on_change=changes.append)
    failing = GuardedEngineClient(
        FakeEngine(fail_with=EngineError("down", code="engine_unavailable")), breaker
    )
    with pytest.raises(EngineError) as unreachable:
        await drain(failing, REQUEST)
    assert unreachable.value.extra["retry_after"] == 1.0
    with pytest.raises(EngineError) as unreachable:
        await drain(failing, REQUEST)
    assert breaker.state == OPEN
    assert unreachable.value.extra["retry_after"] == 10

    healthy = GuardedEngineClient(FakeEngine(["ok"]), breaker)
    with pytest.raises(EngineError) as refused:
        await drain(healthy, REQUEST)
    assert refused.value.code == "engine_unavailable"
    assert 0 < refused.value.extra["retry_after"] <= 10

    clock.now += 11
    breaker.before_call()  # the one probe
    assert breaker.state == HALF_OPEN
    with pytest.raises(EngineError):
        breaker.before_call()  # a second caller while the probe runs
    breaker.record_success()
    assert breaker.state == CLOSED
    await drain(healthy, REQUEST)
    assert changes == [OPEN, HALF_OPEN, CLOSED]


async def test_it_reopens_when_the_probe_fails_and_ignores_refused_requests():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=1, cool_down=5, clock=clock)
    rejected = GuardedEngineClient(FakeEngine(fail_with=EngineError("bad", code="engine_rejected")), breaker)
    with pytest.raises(EngineError):
        await drain(rejected, REQUEST)
    assert breaker.state == CLOSED

    failing = GuardedEngineClient(FakeEngine(fail_with=EngineError("down", code="engine_error")), breaker)
    with pytest.raises(EngineError):
        await drain(failing, REQUEST)
    assert breaker.state == OPEN
    clock.now += 6
    with pytest.raises(EngineError):
        await drain(failing, REQUEST)
    assert breaker.state == OPEN
    assert breaker.retry_after() == pytest.approx(5)


class Unreachable:
    """An engine that cannot be reached, for every kind of call."""

    async def tokenize(self, text: str) -> list[int]:
        raise EngineError("down", code="engine_unavailable")


async def test_it_guards_every_engine_request():
    breaker = CircuitBreaker(failure_threshold=2, cool_down=10, clock=Clock())
    client = GuardedEngineClient(Unreachable(), breaker)
    for _ in range(2):
        with pytest.raises(EngineError):
            await client.tokenize("some text")
    assert breaker.state == OPEN
    with pytest.raises(EngineError) as refused:
        await client.tokenize("some text")
    assert refused.value.code == "engine_unavailable" and refused.value.extra["retry_after"] > 0

"""The embedding engine's client: texts in, unit vectors out, over OpenAI's `/v1/embeddings`.

`embed` blocks (Celery tasks: ingestion), `aembed` awaits (the chat: a question's vector); both
pass through one circuit breaker and raise one error type, inference.client's `EngineError`, with
its codes: `engine_unavailable`, `engine_timeout`, `engine_error` (which open the breaker),
`engine_rejected` (a request the engine refused), `busy` (its queue is full; `retry_after`).
A query is embedded ahead of bulk work (enginehost.embedqueue, or vLLM's priority scheduling).
Vectors travel as base64 float32, a quarter of the bytes of JSON's decimals, and both runners
(enginehost.embedserver, vLLM's pooling runner) answer the same way.
"""

import base64
from array import array
from collections.abc import Sequence

import httpx
import orjson

from eventloops import PerLoop
from inference.breaker import CircuitBreaker
from inference.errors import EngineError, engine_error, status_error

# vLLM's priority: lower runs first.
PRIORITIES = {"query": 0, "bulk": 1}
# Texts one request carries at most (OpenAI's bound); longer lists go as several requests.
MAX_INPUTS = 2048


class EmbeddingClient:
    def __init__(
        self,
        url: str,
        model: str,
        *,
        breaker: CircuitBreaker,
        timeout: float,
        connect_timeout: float,
        api_key: str = "",
    ) -> None:
        self.model = model
        self.breaker = breaker
        self._options = {
            "base_url": url.rstrip("/"),
            "timeout": httpx.Timeout(timeout, connect=connect_timeout),
            # vLLM's server refuses a body of any other type.
            "headers": {"Content-Type": "application/json"}
            | ({"Authorization": f"Bearer {api_key}"} if api_key else {}),
        }
        self._sync: httpx.Client | None = None
        self._async = PerLoop(lambda: httpx.AsyncClient(**self._options))

    def embed(self, texts: Sequence[str], *, priority: str = "bulk") -> list[list[float]]:
        """The vectors of `texts`, in their order (blocks)."""
        if self._sync is None:
            # Made on first use, in the process that uses it (a Celery worker forks after import).
            self._sync = httpx.Client(**self._options)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), MAX_INPUTS):
            body = self._body(texts[start : start + MAX_INPUTS], priority)
            vectors += self._guarded(lambda body=body: self._sync.post("/v1/embeddings", content=body))
        return vectors

    async def aembed(self, texts: Sequence[str], *, priority: str = "query") -> list[list[float]]:
        """The vectors of `texts`, in their order."""
        return (await self.aembed_counted(texts, priority=priority))[0]

    async def aembed_counted(
        self, texts: Sequence[str], *, priority: str = "query"
    ) -> tuple[list[list[float]], int]:
        """The vectors of `texts`, in their order, and the tokens the model read of them."""
        vectors: list[list[float]] = []
        tokens = 0
        for start in range(0, len(texts), MAX_INPUTS):
            body = self._body(texts[start : start + MAX_INPUTS], priority)
            self.breaker.before_call()
            try:
                response = await self._async().post("/v1/embeddings", content=body)
                got, read = self._counted(response)
            except BaseException as exc:
                failure = self._failed(exc)
                if failure is exc:
                    raise
                raise failure from exc
            self.breaker.record(None)
            vectors += got
            tokens += read
        return vectors, tokens

    def tokens(self, text: str) -> int:
        """How many tokens the model reads `text` as, its special tokens included (blocks)."""
        if self._sync is None:
            self._sync = httpx.Client(**self._options)
        body = orjson.dumps({"model": self.model, "prompt": text})
        return self._guarded(lambda: self._sync.post("/tokenize", content=body), parse=_count)

    def _guarded(self, send, parse=None):
        self.breaker.before_call()
        try:
            result = (parse or self._vectors)(send())
        except BaseException as exc:
            failure = self._failed(exc)
            if failure is exc:
                raise
            raise failure from exc
        self.breaker.record(None)
        return result

    def _body(self, texts: Sequence[str], priority: str) -> bytes:
        return orjson.dumps(
            {
                "model": self.model,
                "input": list(texts),
                "encoding_format": "base64",
                "priority": PRIORITIES[priority],
            }
        )

    def _failed(self, exc: BaseException) -> BaseException:
        """What a call that raised `exc` raises, once the breaker has heard of it: an EngineError,
        or `exc` itself where it is no failure of the call (a cancellation)."""
        failure = exc if isinstance(exc, EngineError) or not isinstance(exc, Exception) else engine_error(exc)
        self.breaker.record(failure)
        return failure

    @staticmethod
    def _counted(response: httpx.Response) -> tuple[list[list[float]], int]:
        _raise_for(response)
        body = orjson.loads(response.content)
        data = sorted(body["data"], key=lambda item: item["index"])
        vectors = [array("f", base64.b64decode(item["embedding"])).tolist() for item in data]
        return vectors, int((body.get("usage") or {}).get("prompt_tokens") or 0)

    @classmethod
    def _vectors(cls, response: httpx.Response) -> list[list[float]]:
        return cls._counted(response)[0]

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        client = self._async.pop()
        if client is not None:
            await client.aclose()


def _raise_for(response: httpx.Response) -> None:
    if response.status_code == 429:
        retry_after = float(response.headers.get("retry-after") or 1)
        raise EngineError(
            "The embedding engine is busy.", code="busy", extra={"retry_after": max(retry_after, 1.0)}
        )
    if response.status_code != 200:
        raise status_error(response.status_code, response.content)


def _count(response: httpx.Response) -> int:
    _raise_for(response)
    return int(orjson.loads(response.content)["count"])

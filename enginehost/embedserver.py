"""The product's embedding server on transformers: OpenAI's `/v1/embeddings` in-process, for hosts
where it is faster than vLLM's pooling runner (CPU hosts: docs/benchmarks.md, "Knowledge: embedding").

    python -m enginehost.embedserver --model DIR --served-model-name NAME --port 8200 ...

Routes: POST /v1/embeddings (OpenAI's request and response: `input` a string or a list of them,
`encoding_format` float or base64, `dimensions` only the model's own; vLLM's `priority`, lower first),
POST /tokenize (vLLM's shape), GET /v1/models, GET /health, GET /metrics (Prometheus). With
INFERENCE_API_KEY in its environment, the engine's key guard asks for it on every route but
/health, as on the chat engine. Texts are batched by enginehost.embedqueue; each vector is the mean
of the model's last hidden states over the text's tokens (or its first token's, for a checkpoint
that pools so), L2-normalised, as sentence-transformers computes it. With `--quantize` the model's
linear layers run in int8 (`quantized`). Nothing here imports Django:
the launcher (enginehost.embedlaunch) starts it as a child process with only the environment it reads.
"""

import argparse
import asyncio
import base64
import contextlib
import json
import os
from pathlib import Path
from typing import Literal

import numpy as np
import uvicorn
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from enginehost.embedqueue import BULK, QUERY, Batcher, QueueFull, Work
from enginehost.keyguard import KeyGuard

# OpenAI's own bound on the texts of one request.
MAX_INPUTS = 2048


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | list[str] = Field(min_length=1)
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    # vLLM's: lower runs first. Unset: a query (few texts) or bulk work, by the request's size.
    priority: int | None = None

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else self.input


class TokenizeRequest(BaseModel):
    prompt: str
    model: str | None = None
    add_special_tokens: bool = True


def pooling_mode(model: str) -> str:
    """How a sentence-transformers checkpoint pools its tokens into one vector: "cls" (BGE, GTE) or
    "mean" (MiniLM, and a checkpoint that does not say)."""
    config = Path(model) / "1_Pooling" / "config.json"
    if config.is_file() and json.loads(config.read_text()).get("pooling_mode_cls_token"):
        return "cls"
    return "mean"


def quantized(model):
    """`model` with its linear layers in int8: weights quantized once per output channel, each pass's
    activations on the fly (PyTorch's dynamic quantization). The rest (embeddings, attention's
    products, layer norms) stays float32."""
    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


class Encoder:
    """The model on this process's cores: texts in, unit vectors (float32) and token counts out."""

    def __init__(self, model: str, max_tokens: int, threads: int, *, quantize: bool = False) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        torch.set_num_threads(threads)
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModel.from_pretrained(model).eval()
        if quantize:
            self.model = quantized(self.model)
        self.max_tokens = max_tokens
        self.dimensions = self.model.config.hidden_size
        self.cls_pooling = pooling_mode(model) == "cls"

    def __call__(self, texts: list[str]):
        """Unit vectors of `texts` and the tokens each was read as. The texts run in groups of about one
        length (length_groups), each padded to its own longest: a pass that mixes a passage of 200
        tokens with its sentences of 20 would spend most of its work on padding."""
        limits = {"truncation": True, "max_length": self.max_tokens}
        lengths = [len(ids) for ids in self.tokenizer(texts, **limits)["input_ids"]]
        vectors = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for group in length_groups(lengths):
            batch = self.tokenizer([texts[i] for i in group], padding=True, return_tensors="pt", **limits)
            vectors[group] = self._forward(batch)
        return vectors, lengths

    def _forward(self, batch) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state
            if self.cls_pooling:
                pooled = hidden[:, 0]
            else:
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


# A group's longest text is at most this many times its shortest, plus SLACK tokens: padding then costs
# at most about that much, for a few more forward calls a pass.
SPREAD = 1.5
SLACK = 8


def length_groups(lengths: list[int]) -> list[list[int]]:
    """The indices of `lengths`, shortest first, in runs of about one length."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if groups and lengths[i] <= lengths[groups[-1][0]] * SPREAD + SLACK:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        kind = ["lane"]
        self.requests = Counter(
            "embedding_requests", "Requests by outcome.", ["lane", "outcome"], registry=self.registry
        )
        self.texts = Counter("embedding_texts", "Texts embedded.", kind, registry=self.registry)
        self.tokens = Counter("embedding_tokens", "Tokens the model read.", kind, registry=self.registry)
        self.passes = Counter("embedding_forward_passes", "Forward passes.", kind, registry=self.registry)
        self.batch = Histogram(
            "embedding_batch_texts",
            "Texts per forward pass.",
            kind,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=self.registry,
        )
        self.forward = Histogram(
            "embedding_forward_seconds", "Seconds of one forward pass.", kind, registry=self.registry
        )
        self.queue_wait = Histogram(
            "embedding_queue_wait_seconds",
            "Seconds from a request's arrival to its first forward pass.",
            kind,
            registry=self.registry,
        )
        self.waiting = Gauge("embedding_queue_texts", "Texts not yet embedded.", kind, registry=self.registry)

    def on_pass(self, lane: str, texts: int, tokens: int, seconds: float) -> None:
        self.passes.labels(lane).inc()
        self.texts.labels(lane).inc(texts)
        self.tokens.labels(lane).inc(tokens)
        self.batch.labels(lane).observe(texts)
        self.forward.labels(lane).observe(seconds)


async def _disconnected(request: Request) -> None:
    """Return once the request's client has gone (its body is read: the server says nothing else)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def error(
    status: int, message: str, *, kind: str = "invalid_request_error", param=None, code=None, headers=None
):
    """OpenAI's error shape."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code or status}}
    return JSONResponse(body, status_code=status, headers=headers)


class EmbeddingServer:
    def __init__(self, encoder: Encoder, name: str, *, max_batch: int, max_queue: int, query_texts: int):
        self.encoder = encoder
        self.name = name
        self.query_texts = query_texts
        self.metrics = Metrics()
        self.batcher = Batcher(
            encoder, max_batch=max_batch, max_queue=max_queue, on_pass=self.metrics.on_pass
        )
        self.max_queue = max_queue
        for lane in (QUERY, BULK):
            # Read at each scrape.
            self.metrics.waiting.labels(lane).set_function(lambda lane=lane: self.batcher.held(lane))

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/embeddings", self.embeddings, methods=["POST"]),
                Route("/tokenize", self.tokenize, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/metrics", self.prometheus, methods=["GET"]),
            ],
            lifespan=self._lifespan,
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette):
        self.batcher.start()
        yield

    async def embeddings(self, request: Request) -> Response:
        try:
            body = EmbeddingRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            # OpenAI names the request's field, not the place inside it.
            return error(400, first["msg"], param=str(first["loc"][0]) if first["loc"] else None)
        refusal = self._refusal(body)
        if refusal is not None:
            return refusal
        texts = body.texts()
        priority = body.priority if body.priority is not None else int(len(texts) > self.query_texts)
        lane = QUERY if priority <= 0 else BULK
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()

        def finish(work: Work, failure: BaseException | None) -> None:
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(failure))

        work = Work(texts, priority, finish, lane)
        try:
            self.batcher.submit(work)
        except QueueFull as exc:
            self.metrics.requests.labels(lane, "refused").inc()
            return error(429, f"The embedding engine is busy: {exc}.", kind="rate_limit_error",
                         code="busy", headers={"Retry-After": "1"})  # fmt: skip
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({done, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not done.done():  # its client went away: its texts waiting are dropped
                self.batcher.cancel(work)
        if not done.done():
            self.metrics.requests.labels(lane, "gone").inc()
            return Response(status_code=499)
        failure = done.result()
        self.metrics.queue_wait.labels(lane).observe((work.started or work.arrived) - work.arrived)
        if failure is not None:
            self.metrics.requests.labels(lane, "failed").inc()
            return error(500, f"The model failed: {failure}", kind="server_error")
        self.metrics.requests.labels(lane, "ok").inc()
        return JSONResponse(self._response(body, work))

    def _refusal(self, body: EmbeddingRequest) -> Response | None:
        if body.model is not None and body.model != self.name:
            return error(
                404, f"The model `{body.model}` does not exist.", param="model", code="model_not_found"
            )
        if body.dimensions is not None and body.dimensions != self.encoder.dimensions:
            return error(400, f"This model makes vectors of {self.encoder.dimensions} dimensions only.",
                         param="dimensions")  # fmt: skip
        if len(body.texts()) > min(MAX_INPUTS, self.max_queue):
            return error(400, f"At most {min(MAX_INPUTS, self.max_queue)} texts a request.", param="input")
        return None

    def _response(self, body: EmbeddingRequest, work: Work) -> dict:
        if body.encoding_format == "base64":
            encode = lambda vector: base64.b64encode(vector.astype("<f4").tobytes()).decode()  # noqa: E731
        else:
            encode = lambda vector: vector.tolist()  # noqa: E731
        data = [
            {"object": "embedding", "index": index, "embedding": encode(vector)}
            for index, vector in enumerate(work.vectors)
        ]
        usage = {"prompt_tokens": work.tokens, "total_tokens": work.tokens}
        return {"object": "list", "data": data, "model": self.name, "usage": usage}

    async def tokenize(self, request: Request) -> Response:
        try:
            body = TokenizeRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            return error(400, exc.errors()[0]["msg"])
        tokens = self.encoder.tokenizer(body.prompt, add_special_tokens=body.add_special_tokens)["input_ids"]
        return JSONResponse(
            {"count": len(tokens), "max_model_len": self.encoder.max_tokens, "tokens": tokens}
        )

    async def models(self, request: Request) -> Response:
        model = {
            "id": self.name,
            "object": "model",
            "owned_by": "chat",
            "max_model_len": self.encoder.max_tokens,
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def health(self, request: Request) -> Response:
        return Response(status_code=200 if self.batcher.alive() else 503)

    async def prometheus(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-queue", type=int, default=4096)
    parser.add_argument("--query-texts", type=int, default=4)
    parser.add_argument("--quantize", action="store_true", help="the linear layers in int8")
    args = parser.parse_args(argv)
    # Every core this process may run on, which a container's CPU set or the launcher narrow.
    encoder = Encoder(
        args.model, args.max_tokens, threads=len(os.sched_getaffinity(0)), quantize=args.quantize
    )
    # The first pass sets up torch's kernels (most of a second); no request pays for it.
    encoder(["warm up"])
    server = EmbeddingServer(
        encoder,
        args.served_model_name,
        max_batch=args.max_batch,
        max_queue=args.max_queue,
        query_texts=args.query_texts,
    )
    app = server.app()
    guarded = KeyGuard(app) if os.environ.get("INFERENCE_API_KEY") else app
    uvicorn.run(guarded, host=args.host, port=args.port, access_log=False, log_level="info")


if __name__ == "__main__":
    main()

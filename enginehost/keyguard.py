"""Every route of the engine's server but `/health` asks for the engine's key.

vLLM's own check (`--api-key`, VLLM_API_KEY) guards `/v1`, `/v2`, `/inference` and `/cohere` only:
`/invocations`, `/tokenize`, `/metrics`, `/pooling` and the rest answer anyone who reaches the port.
This is the check instead, loaded into vLLM's server by its `--middleware` option (no hop of its own
on the token path), with the key from INFERENCE_API_KEY in the server's environment. `/health`
stays open for the probes and the router's health checks. Nothing here imports Django: it runs in
vLLM's process.
"""

import hashlib
import hmac
import json
import os

OPEN_PATHS = ("/health",)
_REFUSAL = json.dumps({"error": {"message": "A bearer token is required.", "code": 401}}).encode()


class KeyGuard:
    def __init__(self, app) -> None:
        self.app = app
        key = os.environ.get("INFERENCE_API_KEY", "")
        if not key:
            raise RuntimeError("the engine's key guard needs INFERENCE_API_KEY in its environment")
        self._digest = hashlib.sha256(key.encode()).digest()

    def allowed(self, scope) -> bool:
        if scope["path"].removeprefix(scope.get("root_path", "")) in OPEN_PATHS:
            return True
        header = dict(scope.get("headers") or ()).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = header.partition(" ")
        given = hashlib.sha256(token.strip().encode()).digest()
        return scheme.lower() == "bearer" and hmac.compare_digest(given, self._digest)

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or self.allowed(scope):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(_REFUSAL)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _REFUSAL})

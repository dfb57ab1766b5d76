"""What every HTTP surface shares (the chat's WebSocket, its HTTP endpoints, the store API, the jobs
API, the OpenAI-compatible API): the error codes and their refusal (`errors`), JSON bodies in and
errors out (`json`), and Server-Sent Events responses (`sse`).

The lowest room: it imports Django and the standard library, never one of the product's apps."""

// The chat over HTTP, for networks that block WebSockets: the same frames as the socket
// (docs/protocol.md), carried by `POST /chat/stream` (ask), `GET /chat/stream?message=ID` with
// Last-Event-ID (resume) and `POST /chat/stop`, read with fetch and a stream reader. An answer
// whose stream breaks is resumed from the last token shown, as EventSource would.
import * as http from "./http.js";

const RESUME_DELAY_MS = 1000;

// Each SSE event of a response body, as {id, data}, as it arrives.
async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  while (true) {
    const { done, value } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { id: null, data: "" };
      for (const line of block.split("\n")) {
        if (line.startsWith("id: ")) event.id = Number(line.slice(4));
        else if (line.startsWith("data: ")) event.data += line.slice(6);
      }
      yield event;
    }
  }
}

export class HttpTransport {
  // `handlers`: the Connection's {onFrame, onLoggedOut}.
  constructor(handlers) {
    this.handlers = handlers;
  }

  send(frame) {
    if (frame.type === "chat.send") {
      const body = { prompt: frame.content, conversation: frame.conversation };
      if (frame.parent) body.parent = frame.parent;
      this.stream("POST", "/chat/stream", body, null, null);
    } else if (frame.type === "chat.regenerate") {
      this.stream("POST", "/chat/stream", { regenerate: frame.message }, null, null);
    } else if (frame.type === "chat.continue") {
      this.stream("POST", "/chat/stream", { continue: frame.message }, null, null);
    } else if (frame.type === "chat.edit") {
      this.stream("POST", "/chat/stream", { edit: frame.message, prompt: frame.content }, null, null);
    } else if (frame.type === "chat.resume") {
      this.stream("GET", "/chat/stream?message=" + frame.message, null, frame.message, frame.after);
    } else if (frame.type === "chat.stop") {
      http.post("/chat/stop", { message: frame.message }).catch((error) => {
        this.handlers.onFrame({ type: "chat.error", code: error.code || "internal_error", detail: error.message });
      });
    }
    return true;
  }

  async stream(method, url, body, message, after) {
    const headers = { "X-CSRFToken": http.csrfToken() };
    if (body) headers["Content-Type"] = "application/json";
    if (after != null && after >= 0) headers["Last-Event-ID"] = String(after);
    let last = after == null ? -1 : after;
    let closed = false;
    try {
      const response = await fetch(url, { method, credentials: "same-origin", headers, body: body && JSON.stringify(body) });
      if (response.status === 401) { this.handlers.onLoggedOut(); return; }
      if (!response.ok) {
        const data = await response.json().catch(() => ({}));
        const error = data.error || {};
        const retry = Number(response.headers.get("Retry-After")) || undefined;
        this.handlers.onFrame({ type: "chat.error", code: error.code || "internal_error",
                                detail: error.detail || "Request failed (" + response.status + ")", retry_after: retry });
        closed = true;
        return;
      }
      for await (const event of events(response)) {
        if (event.data === "[DONE]") { closed = true; break; }
        const data = JSON.parse(event.data);
        if (data.started) {
          message = data.message;
          this.handlers.onFrame({ type: "chat.started", conversation: data.conversation, message: data.message,
                                  user_message: data.user_message });
        } else if ("token" in data) {
          last = event.id;
          this.handlers.onFrame({ type: "chat.token", message, seq: event.id, text: data.token });
        } else if (data.notice) {
          this.handlers.onFrame({ type: "chat.notice", message, ...data.notice });
        } else if (data.done) {
          closed = true;
          this.handlers.onFrame({ type: "chat.done", message: data.message, status: data.status,
                                  finish_reason: data.finish_reason, usage: data.usage, ttft_ms: data.ttft_ms,
                                  note: data.note, content: data.content });
        } else if (data.error) {
          closed = true;
          this.handlers.onFrame({ type: "chat.error", ...data.error, message: data.message, status: data.status,
                                  content: data.content, retry_after: data.retry_after });
        }
      }
    } catch (error) {
      // The network dropped the stream: resumed below.
    }
    // An answer whose stream ended without its closing event goes on on the server: follow it again.
    if (!closed && message != null) {
      setTimeout(() => this.stream("GET", "/chat/stream?message=" + message, null, message, last), RESUME_DELAY_MS);
    }
  }
}

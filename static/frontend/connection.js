// The chat's WebSocket to /ws/chat/ (docs/protocol.md): frames out, frames in, and
// reconnection with backoff. Frames sent while the socket (re)connects wait in an outbox
// and go out in order once it opens, so a message typed as the page loads, or during a
// reconnect, is not lost. What to resend after a reconnect (resuming an answer) is the
// caller's, in onOpen, which runs before the outbox is emptied.
//
// Where the socket cannot open at all (a proxy that blocks WebSockets), the chat goes on over
// HTTP (http-transport.js): after FALLBACK_AFTER tries in a row that never opened, the same frames go
// through `POST /chat/stream` and come back as Server-Sent Events. The tab remembers that (sessionStorage),
// so its next pages go to HTTP at once instead of trying the socket again; a socket that never opened
// is not reported as a lost connection.
import { HttpTransport } from "./http-transport.js";

const FALLBACK_AFTER = 3;
const REMEMBERED = "chat-transport";
// A socket a proxy holds open without ever upgrading it counts as one that failed.
const OPEN_TIMEOUT_MS = 8000;
// Reconnects back off exponentially from RETRY_BASE_MS to RETRY_CAP_MS with full jitter: each wait
// is drawn between 0 and its bound, so the sockets one restart cut come back spread over the window
// instead of all at once.
const RETRY_BASE_MS = 500;
const RETRY_CAP_MS = 10000;

export class Connection {
  constructor(path, { onOpen, onFrame, onLost, onLoggedOut }) {
    this.path = path;
    this.handlers = { onOpen, onFrame, onLost, onLoggedOut };
    this.socket = null;
    this.outbox = [];
    this.retryBound = RETRY_BASE_MS;
    this.neverOpened = 0; // tries in a row that never opened
    this.http = null; // the HTTP transport, once the socket has been given up
    this.unheard = null;
    this.slot = null; // the ticket of the slot a refusal gave: the next socket brings it back
  }

  useHttp() {
    sessionStorage.setItem(REMEMBERED, "http");
    this.http = new HttpTransport(this.handlers);
    this.handlers.onOpen();
    while (this.outbox.length) this.http.send(this.outbox.shift());
  }

  open() {
    if (this.http) return;
    if (sessionStorage.getItem(REMEMBERED) === "http") { this.useHttp(); return; }
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const slot = this.slot ? "?slot=" + encodeURIComponent(this.slot) : "";
    this.slot = null;
    const socket = new WebSocket(scheme + location.host + this.path + slot);
    this.socket = socket;
    let opened = false;
    let refusal = null; // the web process's `busy` (reason web_pending) before it closed this socket
    // Frames sent on this socket before it answered anything: a web process that refused the socket
    // read none of them, and they go back to the outbox. Not what onOpen sends (a resume), which the
    // next onOpen sends again.
    this.unheard = null;
    const timer = setTimeout(() => { if (!opened) socket.close(); }, OPEN_TIMEOUT_MS);
    socket.addEventListener("open", () => {
      opened = true;
      clearTimeout(timer);
      this.neverOpened = 0;
      this.retryBound = RETRY_BASE_MS;
      this.handlers.onOpen();
      this.unheard = [];
      while (this.outbox.length) this.send(this.outbox.shift());
    });
    socket.addEventListener("message", (event) => {
      const frame = JSON.parse(event.data);
      if (frame.type === "chat.error" && frame.reason === "web_pending") {
        refusal = frame;
        if (this.socket === socket) this.socket = null; // what is sent from now on waits in the outbox
        return;
      }
      this.unheard = null;
      this.handlers.onFrame(frame);
    });
    socket.addEventListener("close", (event) => {
      clearTimeout(timer);
      // 4401: the session no longer logs the user in (logout, expiry, account change); reconnecting cannot succeed.
      if (event.code === 4401) { this.handlers.onLoggedOut(); return; }
      // 4429 (or its frame, whatever the close said): the web process had too many handshakes waiting
      // and read nothing this socket sent. The page opens again when it was told to, with the
      // ticket of that slot, which any web process of the site takes past its bound.
      if (event.code === 4429 || refusal) {
        this.outbox.unshift(...(this.unheard || []));
        this.unheard = null;
        this.handlers.onLost();
        const wait = refusal && refusal.retry_after ? refusal.retry_after * 1000 : this.nextWait();
        this.slot = (refusal && refusal.slot) || null;
        setTimeout(() => this.open(), wait);
        return;
      }
      if (!opened && ++this.neverOpened >= FALLBACK_AFTER) { this.useHttp(); return; }
      if (opened) this.handlers.onLost();
      setTimeout(() => this.open(), this.nextWait());
    });
  }

  // The wait before the next try: uniform between 0 and the bound, which doubles up to its cap.
  nextWait() {
    const bound = this.retryBound;
    this.retryBound = Math.min(bound * 2, RETRY_CAP_MS);
    return Math.random() * bound;
  }

  // Sends now, or queues until the socket is open; returns whether it went out now.
  send(frame) {
    if (this.http) return this.http.send(frame);
    if (this.socket && this.socket.readyState === WebSocket.OPEN) {
      this.socket.send(JSON.stringify(frame));
      if (this.unheard) this.unheard.push(frame);
      return true;
    }
    this.outbox.push(frame);
    return false;
  }

  // Whether `frame` is still waiting for the socket, so it has certainly not been sent.
  queued(frame) {
    return this.outbox.includes(frame);
  }
}

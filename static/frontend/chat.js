// Chat UI: one WebSocket to /ws/chat/ (protocol in docs/protocol.md).
// Model and user text only ever reach the page as text nodes, never as HTML.
(function () {
  "use strict";

  const initial = JSON.parse(document.getElementById("initial-state").textContent);
  const messagesEl = document.getElementById("messages");
  const statusEl = document.getElementById("status");
  const form = document.getElementById("composer");
  const prompt = document.getElementById("prompt");
  const sendButton = document.getElementById("send");
  const stopButton = document.getElementById("stop");
  const listEl = document.getElementById("conversation-list");

  let conversationId = initial.conversation;
  let socket = null;
  let retryDelay = 500;
  let pending = null; // {messageId, textNode, bubble}
  const bubbles = new Map(); // message id -> bubble element

  function bubble(role, text, id) {
    const el = document.createElement("div");
    el.className = "message " + role;
    const body = document.createElement("div");
    body.className = "body";
    const textNode = document.createTextNode(text || "");
    body.appendChild(textNode);
    el.appendChild(body);
    const meta = document.createElement("div");
    meta.className = "meta";
    el.appendChild(meta);
    messagesEl.appendChild(el);
    if (id) { el.dataset.id = id; bubbles.set(id, el); }
    return { el, textNode, meta };
  }

  function describe(message) {
    const parts = [];
    if (message.status && message.status !== "complete") parts.push(message.status);
    if (message.note) parts.push(message.note);
    if (message.ttft_ms != null) parts.push("first token " + Math.round(message.ttft_ms) + " ms");
    const usage = message.usage || {};
    if (usage.cached_tokens != null && usage.prompt_tokens != null) {
      parts.push(usage.cached_tokens + "/" + usage.prompt_tokens + " prompt tokens from cache");
    }
    return parts.join(" · ");
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  }

  function scrollIfFollowing(following) {
    if (following) window.scrollTo(0, document.body.scrollHeight);
  }

  function setBusy(busy) {
    sendButton.disabled = busy;
    stopButton.hidden = !busy;
  }

  function showStatus(text) { statusEl.textContent = text || ""; }

  function addToList(id, title) {
    if (listEl.querySelector('[data-id="' + id + '"]')) return;
    const link = document.createElement("a");
    link.href = "/c/" + id + "/";
    link.dataset.id = id;
    link.className = "active";
    link.textContent = title;
    listEl.prepend(link);
  }

  function handle(frame) {
    switch (frame.type) {
      case "chat.started": {
        if (conversationId !== frame.conversation) {
          conversationId = frame.conversation;
          history.replaceState(null, "", "/c/" + conversationId + "/");
          addToList(conversationId, pending ? pending.title : "New chat");
        }
        const b = bubble("assistant", "", frame.message);
        b.el.classList.add("generating");
        pending = { messageId: frame.message, textNode: b.textNode, bubble: b };
        setBusy(true);
        break;
      }
      case "chat.token": {
        if (!pending || pending.messageId !== frame.message) return;
        const following = nearBottom();
        pending.textNode.appendData(frame.text);
        scrollIfFollowing(following);
        break;
      }
      case "chat.done": {
        const el = bubbles.get(frame.message);
        if (el) {
          el.classList.remove("generating");
          el.querySelector(".meta").textContent = describe(frame);
        }
        if (pending && pending.messageId === frame.message) pending = null;
        setBusy(false);
        if (document.hidden) document.title = "✓ " + document.title.replace(/^✓ /, "");
        break;
      }
      case "chat.error": {
        showStatus("Error: " + frame.detail + " (" + frame.code + ")");
        if (frame.message && bubbles.has(frame.message)) {
          const el = bubbles.get(frame.message);
          el.classList.remove("generating");
          el.classList.add("error");
          el.querySelector(".meta").textContent = "error · " + frame.detail;
        }
        if (!pending || frame.message === pending.messageId) { pending = null; setBusy(false); }
        break;
      }
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/chat/");
    socket.addEventListener("open", () => { retryDelay = 500; showStatus(""); });
    socket.addEventListener("message", (event) => handle(JSON.parse(event.data)));
    socket.addEventListener("close", () => {
      if (pending) { pending = null; setBusy(false); }
      showStatus("Connection lost; reconnecting…");
      setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 10000);
    });
  }

  function send() {
    const content = prompt.value.trim();
    if (!content || !socket || socket.readyState !== WebSocket.OPEN || pending) return;
    bubble("user", content);
    pending = { title: content.slice(0, 60) };
    socket.send(JSON.stringify({ type: "chat.send", conversation: conversationId, content }));
    prompt.value = "";
    showStatus("");
    scrollIfFollowing(true);
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); send(); });
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); send(); }
  });
  function stop() {
    if (pending && pending.messageId && socket) {
      socket.send(JSON.stringify({ type: "chat.stop", message: pending.messageId }));
    }
  }
  stopButton.addEventListener("click", stop);
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") stop(); });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) document.title = document.title.replace(/^✓ /, "");
  });

  for (const message of initial.messages) {
    const b = bubble(message.role, message.content, message.id);
    b.meta.textContent = message.role === "assistant" ? describe(message) : "";
  }
  scrollIfFollowing(true);
  connect();
})();

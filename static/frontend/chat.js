// Chat UI: one WebSocket to /ws/chat/ (protocol in docs/protocol.md).
// User text reaches the page only as text nodes; answers only through ChatMarkdown
// (markdown.js), which sanitizes. The conversation is a tree of versions (tree.js).
(function () {
  "use strict";

  const initial = JSON.parse(document.getElementById("initial-state").textContent);
  const limits = initial.limits;
  const messagesEl = document.getElementById("messages");
  const statusEl = document.getElementById("status");
  const form = document.getElementById("composer");
  const prompt = document.getElementById("prompt");
  const sendButton = document.getElementById("send");
  const stopButton = document.getElementById("stop");
  const jumpButton = document.getElementById("jump");
  const titleEl = document.getElementById("chat-title");

  let conversation = initial.conversation; // null until the first message or settings
  let tree = new window.ConversationTree(conversation ? conversation.messages : [], conversation && conversation.current_leaf);
  let socket = null;
  let retryDelay = 500;
  let request = null; // a frame sent and not yet answered by chat.started: {frame, parent, content, echo}
  let live = null; // the answer streaming now: {id, renderer, lastSeq, firstTokenAt}
  let following = true; // keep the newest text in view; scrolling up stops it
  const views = new Map(); // message id -> its rendered element

  // ---- rendering -------------------------------------------------------------

  function figures(message) {
    const parts = [];
    if (message.ttft_ms != null) parts.push("first token " + Math.round(message.ttft_ms) + " ms");
    const usage = message.usage || {};
    const seconds = message.stream_seconds != null ? message.stream_seconds
      : (message.duration_ms != null && message.ttft_ms != null ? (message.duration_ms - message.ttft_ms) / 1000 : null);
    if (usage.completion_tokens && seconds > 0) parts.push((usage.completion_tokens / seconds).toFixed(1) + " tokens/s");
    if (usage.completion_tokens != null) parts.push(usage.completion_tokens + " tokens");
    if (usage.cached_tokens != null && usage.prompt_tokens != null) {
      parts.push(usage.cached_tokens + " of " + usage.prompt_tokens + " prompt tokens from cache");
    }
    return parts.join(" · ") || "No figures for this answer.";
  }

  function statusLine(message) {
    if (message.role !== "assistant" || message.status === "complete" || message.status === "generating") return "";
    return [message.status, message.note].filter(Boolean).join(" · ");
  }

  function button(className, text, title, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = className;
    b.textContent = text;
    if (title) { b.title = title; b.setAttribute("aria-label", title); }
    b.addEventListener("click", onClick);
    return b;
  }

  function versionNav(message) {
    const siblings = tree.siblings(message.id);
    const nav = document.createElement("span");
    nav.className = "versions";
    if (siblings.length < 2) { nav.hidden = true; return nav; }
    const index = siblings.indexOf(message.id);
    const label = document.createElement("span");
    label.className = "version-label";
    label.textContent = index + 1 + "/" + siblings.length;
    const prev = button("version-prev", "‹", "Previous version", () => flip(message.id, -1));
    const next = button("version-next", "›", "Next version", () => flip(message.id, 1));
    prev.disabled = index === 0 || busy();
    next.disabled = index === siblings.length - 1 || busy();
    nav.append(prev, label, next);
    return nav;
  }

  function renderMessage(message) {
    const el = document.createElement("div");
    el.className = "message " + message.role;
    el.dataset.id = message.id;
    if (message.status === "generating") el.classList.add("generating");
    if (["error", "timeout", "interrupted"].includes(message.status)) el.classList.add("error");
    const body = document.createElement("div");
    body.className = "body";
    if (message.role === "assistant") window.ChatMarkdown.render(body, message.content || "");
    else body.textContent = message.content;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = statusLine(message);
    const tools = document.createElement("div");
    tools.className = "tools";
    tools.appendChild(versionNav(message));
    if (message.role === "user") {
      tools.appendChild(button("edit", "Edit", "Edit and resend", () => startEdit(message.id)));
    } else {
      tools.appendChild(window.ChatMarkdown.copyButton(() => tree.get(message.id).content));
      tools.appendChild(button("regenerate", "Regenerate", "Answer again", () => regenerate(message.id)));
      const info = document.createElement("div");
      info.className = "figures";
      info.hidden = true;
      tools.appendChild(button("info", "Figures", "Time to first token, speed, cache", () => {
        info.textContent = figures(tree.get(message.id));
        info.hidden = !info.hidden;
      }));
      el.append(body, meta, tools, info);
      return el;
    }
    el.append(body, meta, tools);
    return el;
  }

  function view(message) {
    let el = views.get(message.id);
    if (!el) { el = renderMessage(message); views.set(message.id, el); }
    return el;
  }

  function refresh(id) {
    const message = tree.get(id);
    const old = views.get(id);
    views.delete(id);
    const el = view(message);
    if (old && old.parentNode) old.replaceWith(el);
    return el;
  }

  // Show the chosen path; the version navigation of every message is redrawn.
  function renderPath() {
    const path = tree.path();
    for (const message of path) {
      const el = view(message);
      el.querySelector(".versions").replaceWith(versionNav(message));
    }
    messagesEl.replaceChildren(...path.map((m) => views.get(m.id)));
    keepInView();
  }

  // ---- scrolling -------------------------------------------------------------

  function atBottom() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 48;
  }

  function keepInView() {
    if (following) window.scrollTo(0, document.documentElement.scrollHeight);
    jumpButton.hidden = following || atBottom();
  }

  // Scrolling up means reading: stop following. Back at the bottom: follow again.
  // (Growing content never moves scrollY, so only the reader's scrolling counts.)
  let lastY = window.scrollY;
  window.addEventListener("scroll", () => {
    if (window.scrollY < lastY - 2) following = false;
    else if (atBottom()) following = true;
    lastY = window.scrollY;
    jumpButton.hidden = following;
  }, { passive: true });
  jumpButton.addEventListener("click", () => { following = true; keepInView(); });

  // ---- state -----------------------------------------------------------------

  function busy() { return Boolean(request || live); }

  function setBusy() {
    sendButton.disabled = busy();
    stopButton.hidden = !live;
    for (const b of messagesEl.querySelectorAll(".edit, .regenerate")) b.disabled = busy();
    for (const b of messagesEl.querySelectorAll(".version-prev, .version-next")) if (busy()) b.disabled = true;
    if (!busy()) renderPath();
  }

  function showStatus(text) { statusEl.textContent = text || ""; }

  function setConversation(id, title) {
    if (conversation && conversation.id === id) return;
    conversation = { id, title, settings: null, messages: [], current_leaf: null };
    history.replaceState(null, "", "/c/" + id + "/");
    titleEl.textContent = title || "New chat";
    document.title = (title || "New chat") + " · Chat";
    window.ChatSidebar.touch(id, title);
    window.ChatSidebar.setActive(id);
  }

  function rememberShown() {
    const leaf = tree.leaf();
    if (conversation && leaf) {
      window.ChatHttp.post("/c/" + conversation.id + "/show", { message: leaf.id }).catch(() => {});
    }
  }

  // ---- actions ---------------------------------------------------------------

  // Frames sent while the socket (re)connects wait here, and go out in order once it opens:
  // a message typed as the page loads, or during a reconnect, is not lost.
  const outbox = [];

  function sendFrame(frame) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(frame));
    } else {
      outbox.push(frame);
      showStatus("Connecting… it goes out as soon as the connection is up.");
    }
  }

  function begin(frame, parent, content) {
    if (busy()) return false;
    let echo = null;
    if (content != null) {
      echo = renderMessage({ id: 0, role: "user", content, status: "complete" });
      echo.classList.add("pending");
      // A new version of a turn replaces what follows the fork until it is stored.
      if (frame.type === "chat.edit") {
        const path = tree.path();
        const at = path.findIndex((m) => m.id === frame.message);
        for (const m of path.slice(at)) { const el = views.get(m.id); if (el) el.remove(); }
      }
      messagesEl.appendChild(echo);
    }
    request = { frame, parent, content, echo };
    following = true;
    keepInView();
    showStatus("");
    setBusy();
    sendFrame(frame);
    return true;
  }

  function send() {
    const content = prompt.value.trim();
    if (!content) return;
    if (content.length > limits.content_chars) { showStatus("The message is longer than " + limits.content_chars + " characters."); return; }
    const leaf = tree.leaf();
    const frame = { type: "chat.send", conversation: conversation ? conversation.id : null, content };
    if (leaf) frame.parent = leaf.id;
    if (begin(frame, leaf ? leaf.id : null, content)) prompt.value = "";
  }

  function regenerate(id) {
    const answer = tree.get(id);
    begin({ type: "chat.regenerate", message: id }, answer.parent, null);
  }

  function startEdit(id) {
    if (busy()) return;
    const message = tree.get(id);
    const el = views.get(id);
    const body = el.querySelector(".body");
    const editor = document.createElement("form");
    editor.className = "editor";
    const area = document.createElement("textarea");
    area.value = message.content;
    area.rows = Math.min(10, message.content.split("\n").length + 1);
    const save = document.createElement("button");
    save.type = "submit";
    save.textContent = "Send";
    const cancel = button("secondary", "Cancel", null, () => { editor.replaceWith(body); });
    editor.append(area, cancel, save);
    editor.addEventListener("submit", (event) => {
      event.preventDefault();
      const content = area.value.trim();
      if (!content) return;
      editor.replaceWith(body);
      if (content === message.content) return;
      begin({ type: "chat.edit", message: id, content }, message.parent, content);
    });
    area.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); editor.requestSubmit(); }
      if (event.key === "Escape") { event.preventDefault(); event.stopPropagation(); editor.replaceWith(body); }
    });
    body.replaceWith(editor);
    area.focus();
  }

  function flip(id, step) {
    if (busy()) return;
    if (tree.flip(id, step)) {
      renderPath();
      rememberShown();
    }
  }

  function stop() {
    if (live) sendFrame({ type: "chat.stop", message: live.id });
  }

  // ---- live answers ----------------------------------------------------------

  function follow(id) {
    const el = refresh(id);
    const body = el.querySelector(".body");
    const renderer = new window.ChatMarkdown.StreamRenderer(body);
    renderer.onRender = keepInView;
    live = { id, renderer, lastSeq: -1, firstTokenAt: null };
    setBusy();
  }

  function finishLive(frame, fields) {
    const message = tree.get(frame.message);
    if (!message) return;
    Object.assign(message, fields);
    if (typeof frame.content === "string") message.content = frame.content;
    if (live && live.id === frame.message) {
      if (live.firstTokenAt != null) message.stream_seconds = (performance.now() - live.firstTokenAt) / 1000;
      live = null;
    }
    refresh(frame.message);
    setBusy();
    if (document.hidden) document.title = "✓ " + document.title.replace(/^✓ /, "");
  }

  function handle(frame) {
    switch (frame.type) {
      case "chat.started": {
        const pending = request;
        request = null;
        if (pending && pending.echo) pending.echo.remove();
        const title = pending && pending.content ? pending.content.replace(/\s+/g, " ").trim().slice(0, 60) : null;
        setConversation(frame.conversation, title);
        if (!conversation.title && title) {
          conversation.title = title;
          titleEl.textContent = title;
          window.ChatSidebar.touch(frame.conversation, title);
        }
        if (!tree.get(frame.user_message)) {
          tree.add({ id: frame.user_message, parent: pending ? pending.parent : null, role: "user",
                     content: pending ? pending.content : "", status: "complete" });
        }
        tree.add({ id: frame.message, parent: frame.user_message, role: "assistant", content: "",
                   status: "generating", usage: {} });
        tree.showPathTo(frame.message);
        renderPath();
        follow(frame.message);
        window.ChatSidebar.touch(frame.conversation);
        break;
      }
      case "chat.token": {
        if (!live || live.id !== frame.message || frame.seq <= live.lastSeq) return;
        live.lastSeq = frame.seq;
        if (live.firstTokenAt == null) live.firstTokenAt = performance.now();
        tree.get(frame.message).content += frame.text;
        live.renderer.append(frame.text);
        break;
      }
      case "chat.done": {
        finishLive(frame, { status: frame.status, note: frame.note || "", usage: frame.usage || {},
                            ttft_ms: frame.ttft_ms, finish_reason: frame.finish_reason });
        break;
      }
      case "chat.error": {
        if (frame.message && tree.get(frame.message)) {
          finishLive(frame, { status: frame.status || "error", note: frame.detail, error_code: frame.code });
          showStatus("The answer failed: " + frame.detail);
          break;
        }
        // A refused request: nothing was stored, so give the text back to the composer.
        if (request) {
          if (request.echo) { request.echo.remove(); if (request.frame.type === "chat.send") prompt.value = request.content; }
          request = null;
          setBusy();
        }
        const wait = frame.retry_after ? " Try again in " + Math.ceil(frame.retry_after) + " s." : "";
        showStatus(frame.detail + wait);
        break;
      }
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/chat/");
    socket.addEventListener("open", () => {
      retryDelay = 500;
      showStatus("");
      // An answer that was streaming when the connection dropped (or when the page
      // was loaded) continues from the last token shown.
      if (live) sendFrame({ type: "chat.resume", message: live.id, after: live.lastSeq });
      while (outbox.length) sendFrame(outbox.shift());
    });
    socket.addEventListener("message", (event) => handle(JSON.parse(event.data)));
    socket.addEventListener("close", (event) => {
      // 4401: the session logged out (in this tab or another); reconnecting cannot succeed.
      if (event.code === 4401) { location.assign("/accounts/login/"); return; }
      // A request that went out may or may not have arrived: it is dropped. One still in
      // the outbox never left, and goes out after the reconnect.
      if (request && !outbox.includes(request.frame)) { if (request.echo) request.echo.remove(); request = null; setBusy(); }
      showStatus("Connection lost; reconnecting…");
      setTimeout(connect, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 10000);
    });
  }

  // ---- settings --------------------------------------------------------------

  const dialog = document.getElementById("settings-dialog");
  const settingsForm = document.getElementById("settings-form");
  const settingsError = document.getElementById("settings-error");

  function openSettings() {
    const current = (conversation && conversation.settings) || {};
    const defaults = limits.defaults;
    settingsForm.system_prompt.value = current.system_prompt != null ? current.system_prompt : defaults.system_prompt;
    settingsForm.system_prompt.maxLength = limits.system_prompt_chars;
    settingsForm.temperature.value = current.temperature != null ? current.temperature : "";
    settingsForm.temperature.placeholder = "default " + defaults.temperature;
    settingsForm.temperature.min = limits.temperature.min;
    settingsForm.temperature.max = limits.temperature.max;
    settingsForm.max_tokens.value = current.max_tokens != null ? current.max_tokens : "";
    settingsForm.max_tokens.placeholder = "default " + defaults.max_tokens;
    settingsForm.max_tokens.min = limits.max_tokens.min;
    settingsForm.max_tokens.max = limits.max_tokens.max;
    settingsForm.min_tokens.value = current.min_tokens != null ? current.min_tokens : "";
    settingsForm.min_tokens.min = limits.min_tokens.min;
    settingsForm.min_tokens.max = limits.min_tokens.max;
    dialog.querySelector('[data-for="temperature"]').textContent = limits.temperature.min + "–" + limits.temperature.max;
    dialog.querySelector('[data-for="max_tokens"]').textContent = limits.max_tokens.min + "–" + limits.max_tokens.max;
    dialog.querySelector('[data-for="min_tokens"]').textContent = limits.min_tokens.min + "–" + limits.min_tokens.max;
    settingsError.textContent = "";
    dialog.showModal();
  }

  settingsForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!settingsForm.reportValidity()) return;
    const number = (input) => (input.value === "" ? null : Number(input.value));
    const values = {
      system_prompt: settingsForm.system_prompt.value,
      temperature: number(settingsForm.temperature),
      max_tokens: number(settingsForm.max_tokens),
      min_tokens: number(settingsForm.min_tokens),
    };
    try {
      if (conversation) {
        conversation.settings = await window.ChatHttp.post("/c/" + conversation.id + "/settings", values);
      } else {
        const created = await window.ChatHttp.post("/c/new", { settings: values });
        setConversation(created.id, created.title);
        conversation.settings = created.settings;
      }
      dialog.close();
    } catch (error) {
      settingsError.textContent = error.message;
    }
  });
  document.getElementById("settings-cancel").addEventListener("click", () => dialog.close());
  document.getElementById("open-settings").addEventListener("click", openSettings);

  document.addEventListener("chat:renamed", (event) => {
    if (conversation && event.detail.id === conversation.id) {
      titleEl.textContent = event.detail.title;
      document.title = event.detail.title + " · Chat";
    }
  });

  // ---- keys and start-up -----------------------------------------------------

  form.addEventListener("submit", (event) => { event.preventDefault(); send(); });
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); send(); }
  });
  stopButton.addEventListener("click", stop);
  document.addEventListener("keydown", (event) => { if (event.key === "Escape" && !dialog.open) stop(); });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) document.title = document.title.replace(/^✓ /, "");
  });

  if (conversation) window.ChatSidebar.setActive(conversation.id);
  renderPath();
  const leaf = tree.leaf();
  if (leaf && leaf.status === "generating") follow(leaf.id); // resumed once the socket opens
  setBusy();
  connect();
})();

// Draws the chat from its state (state.js): the chosen path of messages with their version
// navigation, the live answer growing in place, which buttons work while an answer runs,
// and the scroll position (the newest text stays in view until the reader scrolls up).
// User text reaches the page only as text nodes; answers only through markdown.js, which
// sanitizes.
import { icon, iconButton } from "./icons.js";
import { copyButton, render, StreamRenderer } from "./markdown.js";
import { linkMarkers, sourceList } from "./sources.js";

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

// The prefix cache's share of the prompt, at a glance beside each finished answer.
function cachedGlance(message) {
  const usage = message.usage || {};
  if (usage.prompt_tokens == null || usage.cached_tokens == null) return "";
  return usage.cached_tokens + "/" + usage.prompt_tokens + " cached";
}

// An answer that reached its length limit can be continued in place (chat.continue).
function cutOff(message) {
  return message.role === "assistant" && message.status === "complete" && message.finish_reason === "length";
}

function statusLine(message) {
  if (cutOff(message)) return "Cut off at the length limit.";
  if (message.role !== "assistant" || message.status === "complete" || message.status === "generating") return "";
  return [message.status, message.note].filter(Boolean).join(" · ");
}

const EXAMPLES = [
  "Explain how a prefix cache speeds up a chat, in three sentences.",
  "Write a short, friendly email asking to move a meeting to Friday.",
  "Give me a packing list for a weekend of hiking.",
  "What is the difference between a list and a tuple in Python?",
];

// Who wrote a message, for a screen reader: the page shows it by layout and colour alone.
const AUTHORS = { user: "You said:", assistant: "The assistant said:" };

export function button(className, text, title, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = className;
  b.textContent = text;
  if (title) { b.title = title; b.setAttribute("aria-label", title); }
  b.addEventListener("click", onClick);
  return b;
}

export class ChatView {
  // `actions`: what the message buttons do, {flip(id, step), regenerate(id), edit(id, content), extend(id)}.
  constructor(state, actions) {
    this.state = state;
    this.actions = actions;
    this.messagesEl = document.getElementById("messages");
    this.statusEl = document.getElementById("status");
    this.sendButton = document.getElementById("send");
    this.stopButton = document.getElementById("stop");
    this.jumpButton = document.getElementById("jump");
    this.titleEl = document.getElementById("chat-title");
    this.views = new Map(); // message id -> its rendered element
    this.echo = null; // the question sent, shown until it is stored
    this.renderer = null; // the live answer's StreamRenderer
    this.following = true; // keep the newest text in view; scrolling up stops it

    // Scrolling up means reading: stop following. Back at the bottom: follow again.
    // (Growing content never moves scrollY, so only the reader's scrolling counts.)
    let lastY = window.scrollY;
    window.addEventListener("scroll", () => {
      if (window.scrollY < lastY - 2) this.following = false;
      else if (this.atBottom()) this.following = true;
      lastY = window.scrollY;
      this.jumpButton.hidden = this.following;
    }, { passive: true });
    this.jumpButton.addEventListener("click", () => { this.following = true; this.keepInView(); });
  }

  // ---- messages --------------------------------------------------------------

  renderMessage(message) {
    const el = document.createElement("div");
    el.className = "message " + message.role;
    el.dataset.id = message.id;
    if (message.status === "generating") el.classList.add("generating");
    if (["error", "timeout", "interrupted"].includes(message.status)) el.classList.add("error");
    const author = document.createElement("span");
    author.className = "visually-hidden";
    author.textContent = AUTHORS[message.role] || "";
    el.appendChild(author);
    const body = document.createElement("div");
    body.className = "body";
    if (message.role === "assistant") render(body, message.content || "");
    else body.textContent = message.content;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = statusLine(message);
    const tools = document.createElement("div");
    tools.className = "tools";
    tools.appendChild(this.versionNav(message));
    if (message.role === "user") {
      tools.appendChild(iconButton("edit", "pencil", "Edit and resend", () => this.startEdit(message.id)));
      el.append(...this.attachedTo(message), body, meta, tools);
      return el;
    }
    const tree = this.state.tree;
    tools.appendChild(copyButton(() => tree.get(message.id).content));
    if (cutOff(message)) {
      tools.appendChild(iconButton("continue", "chevrons-right", "Continue this answer from where it stopped",
                                   () => this.actions.extend(message.id), "Continue"));
    }
    tools.appendChild(iconButton("regenerate", "refresh-cw", "Regenerate: answer again",
                                 () => this.actions.regenerate(message.id)));
    const info = document.createElement("div");
    info.className = "figures";
    info.hidden = true;
    const infoButton = iconButton("info", "info", "Figures: time to first token, speed, cache", () => {
      info.textContent = figures(tree.get(message.id));
      info.hidden = !info.hidden;
      infoButton.setAttribute("aria-expanded", String(!info.hidden));
    });
    infoButton.setAttribute("aria-expanded", "false");
    tools.appendChild(infoButton);
    const cached = document.createElement("span");
    cached.className = "cached";
    cached.title = "Prompt tokens the engine's prefix cache served";
    const glance = cachedGlance(message);
    if (glance) cached.append(icon("zap"), " " + glance);
    tools.appendChild(cached);
    el.append(body, meta, ...this.sourcesOf(message, body), tools, info);
    return el;
  }

  // An answer's sources under it, and its [n] markers linked to them.
  sourcesOf(message, body) {
    const sources = this.state.sourcesOf(message);
    if (!sources.length) return [];
    const list = sourceList(message.id, sources);
    linkMarkers(body, message.id, sources, list.open);
    return [list.element];
  }

  // The names of the documents a question was sent with, as text.
  attachedTo(message) {
    const documents = this.state.documentsOf(message);
    if (!documents.length) return [];
    const list = document.createElement("ul");
    list.className = "turn-documents";
    list.setAttribute("aria-label", "Attached documents");
    for (const d of documents) {
      const item = document.createElement("li");
      item.append(icon("file-text"), " " + d.name);
      list.appendChild(item);
    }
    return [list];
  }

  versionNav(message) {
    const siblings = this.state.tree.siblings(message.id);
    const nav = document.createElement("span");
    nav.className = "versions";
    if (siblings.length < 2) { nav.hidden = true; return nav; }
    const index = siblings.indexOf(message.id);
    const label = document.createElement("span");
    label.className = "version-label";
    label.textContent = index + 1 + "/" + siblings.length;
    const busy = this.state.busy();
    const prev = iconButton("version-prev", "chevron-left", "Previous version", () => this.actions.flip(message.id, -1));
    const next = iconButton("version-next", "chevron-right", "Next version", () => this.actions.flip(message.id, 1));
    prev.disabled = index === 0 || busy;
    next.disabled = index === siblings.length - 1 || busy;
    nav.append(prev, label, next);
    return nav;
  }

  view(message) {
    let el = this.views.get(message.id);
    if (!el) { el = this.renderMessage(message); this.views.set(message.id, el); }
    return el;
  }

  // Draw one message again from the state, in place.
  refresh(id) {
    const old = this.views.get(id);
    this.views.delete(id);
    const el = this.view(this.state.tree.get(id));
    if (old && old.parentNode) old.replaceWith(el);
    return el;
  }

  // Show the chosen path; the version navigation of every message is redrawn.
  renderPath() {
    const path = this.state.tree.path();
    for (const message of path) {
      this.view(message).querySelector(".versions").replaceWith(this.versionNav(message));
    }
    this.messagesEl.replaceChildren(...(path.length ? path.map((m) => this.views.get(m.id)) : [this.welcome()]));
    this.keepInView();
  }

  // An empty chat says what to do, with a few prompts to start from (a click puts one in the composer).
  welcome() {
    const el = document.createElement("div");
    el.className = "welcome";
    const heading = document.createElement("h2");
    heading.textContent = "What can I help with?";
    const hint = document.createElement("p");
    hint.textContent = "Type a message below, attach a document to ask about it, or start from one of these:";
    const examples = document.createElement("div");
    examples.className = "examples";
    for (const text of EXAMPLES) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "example secondary";
      b.textContent = text;
      b.addEventListener("click", () => {
        const prompt = document.getElementById("prompt");
        prompt.value = text;
        prompt.dispatchEvent(new Event("input"));
        prompt.focus();
      });
      examples.appendChild(b);
    }
    el.append(heading, hint, examples);
    return el;
  }

  // The live answer: drawn afresh, then grown token by token (a continued one from its text so far).
  follow(id) {
    const body = this.refresh(id).querySelector(".body");
    this.renderer = new StreamRenderer(body);
    this.renderer.onRender = () => this.keepInView();
    this.renderer.append(this.state.tree.get(id).content || "");
  }

  append(text) {
    this.renderer.append(text);
  }

  // The question sent, shown greyed until chat.started says it is stored.
  showEcho(frame, content) {
    this.echo = this.renderMessage({ id: 0, role: "user", content, status: "complete" });
    this.echo.classList.add("pending");
    // A new version of a turn replaces what follows the fork until it is stored.
    if (frame.type === "chat.edit") {
      const path = this.state.tree.path();
      const at = path.findIndex((m) => m.id === frame.message);
      for (const m of path.slice(at)) { const el = this.views.get(m.id); if (el) el.remove(); }
    }
    this.messagesEl.appendChild(this.echo);
  }

  dropEcho() {
    if (this.echo) this.echo.remove();
    this.echo = null;
  }

  startEdit(id) {
    if (this.state.busy()) return;
    const message = this.state.tree.get(id);
    const body = this.views.get(id).querySelector(".body");
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
      if (content !== message.content) this.actions.edit(id, content);
    });
    area.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); editor.requestSubmit(); }
      if (event.key === "Escape") { event.preventDefault(); event.stopPropagation(); editor.replaceWith(body); }
    });
    body.replaceWith(editor);
    area.focus();
  }

  // ---- page ------------------------------------------------------------------

  // Buttons that would change the conversation wait while a request or answer runs.
  setBusy() {
    const busy = this.state.busy();
    this.sendButton.disabled = busy;
    this.stopButton.hidden = !this.state.live;
    for (const b of this.messagesEl.querySelectorAll(".edit, .regenerate, .continue")) b.disabled = busy;
    for (const b of this.messagesEl.querySelectorAll(".version-prev, .version-next")) if (busy) b.disabled = true;
    if (!busy) this.renderPath();
  }

  showStatus(text) {
    this.statusEl.textContent = text || "";
  }

  showTitle(title) {
    this.titleEl.textContent = title || "New chat";
    this.titleEl.title = title || "New chat";
    document.title = (title || "New chat") + " · Chat";
  }

  // Said once to a screen reader (a polite live region), e.g. when an answer ends: not every token.
  announce(text) {
    const el = document.getElementById("announcer");
    el.textContent = "";
    setTimeout(() => { el.textContent = text; }, 50);
  }

  atBottom() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 48;
  }

  keepInView() {
    if (this.following) window.scrollTo(0, document.documentElement.scrollHeight);
    this.jumpButton.hidden = this.following || this.atBottom();
  }

  followNewest() {
    this.following = true;
    this.keepInView();
  }
}

// The chat page: the conversation state (state.js), its view (view.js) and the WebSocket
// (connection.js), wired together here. Frames are those of docs/protocol.md.
import { Connection } from "./connection.js";
import * as http from "./http.js";
import { mountCollectionHash } from "./collection-hash.js";
import { mountCollections } from "./collections.js";
import { mountConversationMenu } from "./conversation-menu.js";
import { mountDocuments } from "./documents.js";
import { mountSettings } from "./settings.js";
import { mountShortcuts } from "./shortcuts.js";
import { mountSidebar } from "./sidebar.js";
import { ChatState } from "./state.js";
import { ChatView } from "./view.js";

// The page's root, which every module below is mounted on, and its initial state (read once, here).
const root = document.body;
const initial = JSON.parse(root.querySelector("#initial-state").textContent);
const limits = initial.limits;
const form = root.querySelector("#composer");
const prompt = root.querySelector("#prompt");

const sidebar = mountSidebar(root, initial.conversations || []);
const state = new ChatState(initial.conversation);
const view = new ChatView(state, { flip, regenerate, edit, extend });
const connection = new Connection("/ws/chat/", {
  onOpen() {
    view.showStatus("");
    // An answer that was streaming when the connection dropped (or when the page was
    // loaded) continues from the last token shown.
    if (state.live) connection.send({ type: "chat.resume", message: state.live.id, after: state.live.lastSeq });
  },
  onFrame: handle,
  onLost() {
    // A request that went out may or may not have arrived: it is dropped. One still in the
    // outbox never left, and goes out after the reconnect.
    if (state.request && !connection.queued(state.request.frame)) {
      view.dropEcho();
      state.dropRequest();
      view.setBusy();
    }
    view.showStatus("Connection lost; reconnecting…");
  },
  onLoggedOut() { location.assign("/accounts/login/"); },
});
const settingsDialog = mountSettings(root, limits, {
  conversation: () => state.conversation,
  hasMessages: () => state.tree.path().length > 0,
  created(conversation) {
    enter(conversation.id, conversation.title);
    state.useSettings(conversation.settings);
  },
});

const conversationMenu = mountConversationMenu(root, { conversation: () => state.conversation });
// What attaching a document or choosing a collection needs: the conversation (a new chat makes it
// first, as {conversation, created}), and, where that failed, the one just made deleted again, so no
// empty "New chat" is left behind.
const attaching = {
  async ensure() {
    let made = null;
    if (!state.conversation) {
      made = await http.post("/c/new", {});
      enter(made.id, made.title);
      state.useSettings(made.settings);
    }
    state.documents();
    return { conversation: state.conversation, created: Boolean(made) };
  },
  async discard(conversation) {
    if (state.conversation !== conversation || state.busy() || state.tree.path().length) return;
    try {
      await http.post("/c/" + conversation.id + "/delete");
    } catch (error) {
      return; // kept: it can still be used, or deleted from the list
    }
    state.leave();
    history.replaceState(null, "", "/");
    view.showTitle(null);
    sidebar.forget(conversation.id);
  },
  say: (text) => view.showStatus(text),
};
mountDocuments(root, { conversation: () => state.conversation, ...attaching });
const collections = mountCollections(root, initial.collections || [], {
  chosen: () => state.collections(),
  saved: (ids) => state.useCollections(ids),
  ...attaching,
});
// Mounted before the composer's own keys below: its Enter picks a collection instead of sending.
mountCollectionHash(root, initial.collections || [], { chosen: () => state.collections(), pick: collections.add });

// ---- the conversation --------------------------------------------------------

function enter(id, title) {
  if (!state.enter(id, title)) return;
  history.replaceState(null, "", "/c/" + id + "/");
  view.showTitle(title);
  sidebar.touch(id, title);
  sidebar.setActive(id);
}

function rememberShown() {
  const leaf = state.tree.leaf();
  if (state.conversation && leaf) {
    http.post("/c/" + state.conversation.id + "/show", { message: leaf.id }).catch(() => {});
  }
}

function follow(id) {
  state.follow(id);
  view.follow(id);
  view.setBusy();
}

function finish(frame, fields) {
  const message = state.finish(frame, fields);
  if (!message) return;
  view.refresh(frame.message);
  view.setBusy();
  view.announce(message.status === "complete" ? "The answer is complete."
    : "The answer ended: " + [message.status, message.note].filter(Boolean).join(", ") + ".");
  if (document.hidden) document.title = "✓ " + document.title.replace(/^✓ /, "");
}

// ---- actions -----------------------------------------------------------------

function begin(frame, parent, content) {
  if (state.busy()) return false;
  if (content != null) view.showEcho(frame, content);
  state.ask(frame, parent, content);
  view.followNewest();
  view.showStatus("");
  view.setBusy();
  if (!connection.send(frame)) view.showStatus("Connecting… it goes out as soon as the connection is up.");
  return true;
}

function send() {
  const content = prompt.value.trim();
  if (!content) return;
  if (content.length > limits.content_chars) {
    view.showStatus("The message is longer than " + limits.content_chars + " characters.");
    return;
  }
  const leaf = state.tree.leaf();
  const frame = { type: "chat.send", conversation: state.conversation ? state.conversation.id : null, content };
  if (leaf) frame.parent = leaf.id;
  if (begin(frame, leaf ? leaf.id : null, content)) { prompt.value = ""; count(); }
}

function regenerate(id) {
  begin({ type: "chat.regenerate", message: id }, state.tree.get(id).parent, null);
}

function edit(id, content) {
  begin({ type: "chat.edit", message: id, content }, state.tree.get(id).parent, content);
}

// Continue an answer cut off at its length limit: the same message grows.
function extend(id) {
  begin({ type: "chat.continue", message: id }, state.tree.get(id).parent, null);
}

function flip(id, step) {
  if (state.busy() || !state.tree.flip(id, step)) return;
  view.renderPath();
  rememberShown();
}

function stop() {
  if (state.live) connection.send({ type: "chat.stop", message: state.live.id });
}

// ---- frames ------------------------------------------------------------------

// Whether the status line shows a running answer's notice (chat.notice), which its next frame ends.
let noticed = false;
function endNotice() {
  if (noticed) { noticed = false; view.showStatus(""); }
}

function handle(frame) {
  switch (frame.type) {
    case "chat.started": {
      view.dropEcho();
      const pending = state.started(frame);
      const title = pending && pending.content ? pending.content.replace(/\s+/g, " ").trim().slice(0, 60) : null;
      enter(frame.conversation, title);
      if (state.nameIfUntitled(title)) {
        view.showTitle(title);
        sidebar.touch(frame.conversation, title);
      }
      view.renderPath();
      follow(frame.message);
      sidebar.touch(frame.conversation);
      break;
    }
    case "chat.token": {
      if (state.token(frame)) {
        view.append(frame.text);
        endNotice();
      }
      break;
    }
    case "chat.notice": {
      // The answer waits (its engine went away); its next token, or its end, clears this.
      if (state.live && state.live.id === frame.message) { noticed = true; view.showStatus(frame.detail); }
      break;
    }
    case "chat.done": {
      endNotice();
      finish(frame, { status: frame.status, note: frame.note || "", usage: frame.usage || {},
                      ttft_ms: frame.ttft_ms, finish_reason: frame.finish_reason });
      break;
    }
    case "chat.error": {
      noticed = false;
      if (frame.message && state.tree.get(frame.message)) {
        finish(frame, { status: frame.status || "error", note: frame.detail, error_code: frame.code });
        view.showStatus("The answer failed: " + frame.detail);
        break;
      }
      // A refused request: nothing was stored, so give the text back to the composer.
      const refused = state.request;
      if (refused) {
        view.dropEcho();
        if (refused.frame.type === "chat.send") { prompt.value = refused.content; count(); }
        state.dropRequest();
        view.setBusy();
      }
      // A spent quota's detail says when it resets; a wait in seconds would read as hours of them.
      const wait = frame.retry_after && !frame.reset_at ? " Try again in " + Math.ceil(frame.retry_after) + " s." : "";
      view.showStatus(frame.detail + wait);
      break;
    }
  }
}

// ---- keys and start-up -------------------------------------------------------

form.addEventListener("submit", (event) => { event.preventDefault(); send(); });
// Near the limit, the composer counts the characters left.
const counter = root.querySelector("#counter");
function count() {
  const length = prompt.value.length;
  counter.hidden = length < limits.content_chars * 0.9;
  counter.textContent = length.toLocaleString() + " / " + limits.content_chars.toLocaleString();
  counter.classList.toggle("over", length > limits.content_chars);
}
prompt.addEventListener("input", count);
prompt.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); send(); }
});
root.querySelector("#stop").addEventListener("click", stop);
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !settingsDialog.isOpen() && !conversationMenu.isOpen()) stop();
});
mountShortcuts(root, {
  newChat() { location.assign("/"); },
  focusSearch() { root.querySelector("#search").focus(); },
  copyLast() {
    const last = state.tree.path().filter((m) => m.role === "assistant").pop();
    if (last) navigator.clipboard.writeText(last.content || "").then(() => view.showStatus("Copied the last answer."), () => {});
  },
  regenerateLast() {
    const last = state.tree.path().filter((m) => m.role === "assistant").pop();
    if (last) regenerate(last.id);
  },
});
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) document.title = document.title.replace(/^✓ /, "");
});
document.addEventListener("chat:renamed", (event) => {
  if (state.conversation && event.detail.id === state.conversation.id) view.showTitle(event.detail.title);
});

if (state.conversation) sidebar.setActive(state.conversation.id);
view.renderPath();
const leaf = state.tree.leaf();
if (leaf && leaf.status === "generating") follow(leaf.id); // resumed once the socket opens
view.setBusy();
connection.open();

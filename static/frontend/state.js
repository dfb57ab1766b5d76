// What the chat page knows of its conversation: the tree of messages (tree.js), the
// request waiting for chat.started, and the answer streaming now. No DOM here: the view
// (view.js) draws from it and the page (chat.js) changes it as frames arrive.
import { ConversationTree } from "./tree.js";

export class ChatState {
  constructor(conversation) {
    this.conversation = conversation; // null until the first message or settings
    this.tree = new ConversationTree(
      conversation ? conversation.messages : [],
      conversation && conversation.current_leaf,
    );
    this.request = null; // sent and not yet answered by chat.started: {frame, parent, content}
    this.live = null; // the answer streaming now: {id, lastSeq, firstTokenAt}
  }

  busy() {
    return Boolean(this.request || this.live);
  }

  // Returns whether `id` is a conversation this page was not showing yet.
  enter(id, title) {
    if (this.conversation && this.conversation.id === id) return false;
    this.conversation = { id, title, settings: null, messages: [], current_leaf: null };
    return true;
  }

  // The conversation shown is gone (deleted before its first message): none is shown.
  leave() {
    this.conversation = null;
  }

  // The settings the server holds for the conversation shown.
  useSettings(settings) {
    this.conversation.settings = settings;
  }

  // The title of the conversation shown, when it has none yet. Returns whether it was given.
  nameIfUntitled(title) {
    if (this.conversation.title || !title) return false;
    this.conversation.title = title;
    return true;
  }

  // The documents attached to the conversation shown (a list, empty before the first).
  documents() {
    if (!this.conversation.documents) this.conversation.documents = [];
    return this.conversation.documents;
  }

  // The ids of the collections the conversation shown retrieves from (none before it exists).
  collections() {
    return (this.conversation && this.conversation.collections) || [];
  }

  // The collections the server now holds for the conversation shown.
  useCollections(ids) {
    this.conversation.collections = ids;
  }

  // The passages an answer's prompt quoted, by number: its question's sources (none while it streams).
  sourcesOf(message) {
    if (message.role !== "assistant" || message.status === "generating") return [];
    const question = this.tree.get(message.parent);
    return (question && question.sources) || [];
  }

  // A request sent, waiting for chat.started: {frame, parent, content}.
  ask(frame, parent, content) {
    this.request = { frame, parent, content };
  }

  // The request waiting is dropped: refused, or lost with the connection.
  dropRequest() {
    this.request = null;
  }

  // chat.started: the question (unless it is a regenerated answer's) and the answer are
  // stored; the answer is the newest message on the path shown. Returns the request answered.
  started(frame) {
    const pending = this.request;
    this.request = null;
    if (!this.tree.get(frame.user_message)) {
      this.tree.add({ id: frame.user_message, parent: pending ? pending.parent : null, role: "user",
                      content: pending ? pending.content : "", status: "complete", created_at: null });
    }
    const continued = this.tree.get(frame.message);
    if (continued) {
      // Continued past its length limit: the same answer grows from its text so far.
      Object.assign(continued, { status: "generating", finish_reason: "", note: "" });
    } else {
      this.tree.add({ id: frame.message, parent: frame.user_message, role: "assistant", content: "",
                      status: "generating", usage: {} });
    }
    this.tree.showPathTo(frame.message);
    return pending;
  }

  // The documents a question was sent with: those attached after the question before it on its
  // path (all before the first), and before it (a question just sent: up to now).
  documentsOf(message) {
    const documents = (this.conversation && this.conversation.documents) || [];
    if (message.role !== "user" || !documents.length) return [];
    let earlier = this.tree.get(message.parent);
    while (earlier && earlier.role !== "user") earlier = this.tree.get(earlier.parent);
    const after = earlier && earlier.created_at ? new Date(earlier.created_at) : null;
    const before = message.created_at ? new Date(message.created_at) : null;
    return documents.filter((d) => {
      const at = new Date(d.created_at);
      return (!after || at > after) && (!before || at <= before);
    });
  }

  follow(id) {
    this.live = { id, lastSeq: -1, firstTokenAt: null };
  }

  // chat.token: whether it is new text of the answer followed (a resumed stream may repeat).
  token(frame) {
    const live = this.live;
    if (!live || live.id !== frame.message || frame.seq <= live.lastSeq) return false;
    live.lastSeq = frame.seq;
    if (live.firstTokenAt == null) live.firstTokenAt = performance.now();
    this.tree.get(frame.message).content += frame.text;
    return true;
  }

  // chat.done, or chat.error for a stored answer: its final fields and text, and the sources its
  // question retrieved (they belong to the question). Returns the message, or null for one this page
  // does not show.
  finish(frame, fields) {
    const message = this.tree.get(frame.message);
    if (!message) return null;
    Object.assign(message, fields);
    if (typeof frame.content === "string") message.content = frame.content;
    const question = this.tree.get(message.parent);
    if (frame.sources && question) question.sources = frame.sources;
    if (this.live && this.live.id === frame.message) {
      if (this.live.firstTokenAt != null) {
        message.stream_seconds = (performance.now() - this.live.firstTokenAt) / 1000;
      }
      this.live = null;
    }
    return message;
  }
}

// The messages of one conversation as a tree (docs/store.md): each message points at
// the one it follows; editing or regenerating adds a sibling. The page shows one path
// from the root, choosing one child at each fork; by default the newest one.
const ROOT = 0;

export class ConversationTree {
  constructor(messages, currentLeaf) {
    this.messages = new Map();
    this.children = new Map(); // parent id (ROOT for none) -> child ids, oldest first
    this.chosen = new Map(); // parent id -> the child shown
    for (const message of messages) this.add(message);
    if (currentLeaf && this.messages.has(currentLeaf)) this.showPathTo(currentLeaf);
  }

  add(message) {
    this.messages.set(message.id, message);
    const key = message.parent || ROOT;
    const siblings = this.children.get(key) || [];
    if (!siblings.includes(message.id)) siblings.push(message.id);
    this.children.set(key, siblings);
  }

  get(id) { return this.messages.get(id); }

  siblings(id) {
    const message = this.messages.get(id);
    return this.children.get((message && message.parent) || ROOT) || [id];
  }

  // Show the path that ends at `id`: choose each of its ancestors at their fork.
  showPathTo(id) {
    let message = this.messages.get(id);
    while (message) {
      this.chosen.set(message.parent || ROOT, message.id);
      message = this.messages.get(message.parent);
    }
  }

  // Show the sibling `step` places away from `id` (‹ and ›); returns the new path's leaf.
  flip(id, step) {
    const siblings = this.siblings(id);
    const index = siblings.indexOf(id) + step;
    if (index < 0 || index >= siblings.length) return null;
    const message = this.messages.get(id);
    this.chosen.set((message && message.parent) || ROOT, siblings[index]);
    const path = this.path();
    return path[path.length - 1];
  }

  path() {
    const path = [];
    let key = ROOT;
    for (;;) {
      const children = this.children.get(key);
      if (!children || !children.length) return path;
      const chosen = this.chosen.get(key);
      const next = children.includes(chosen) ? chosen : children[children.length - 1];
      path.push(this.messages.get(next));
      key = next;
    }
  }

  leaf() {
    const path = this.path();
    return path.length ? path[path.length - 1] : null;
  }
}

// Keyboard shortcuts, listed in the ⌨ dialog (Ctrl+/ opens it too). Ctrl stands for ⌘ on a Mac.

export const SHORTCUTS = [
  { keys: "Ctrl+Shift+O", what: "New chat", test: (e) => e.shiftKey && e.key.toLowerCase() === "o", action: "newChat" },
  { keys: "Ctrl+K", what: "Search conversations", test: (e) => !e.shiftKey && e.key.toLowerCase() === "k", action: "focusSearch" },
  { keys: "Ctrl+Shift+C", what: "Copy the last answer", test: (e) => e.shiftKey && e.key.toLowerCase() === "c", action: "copyLast" },
  { keys: "Ctrl+Shift+G", what: "Answer the last question again", test: (e) => e.shiftKey && e.key.toLowerCase() === "g", action: "regenerateLast" },
  { keys: "Ctrl+/", what: "These shortcuts", test: (e) => e.key === "/", action: "showShortcuts" },
  { keys: "Escape", what: "Stop the answer", test: () => false, action: null },
  { keys: "Enter / Shift+Enter", what: "Send / new line", test: () => false, action: null },
];

// Mounts the shortcuts on `root`, which holds their dialog (#shortcuts-dialog) and its opener
// (#open-shortcuts); the keys work on the whole document. `actions`: {newChat, focusSearch, copyLast,
// regenerateLast}, each a function.
export function mountShortcuts(root, actions) {
  const dialog = root.querySelector("#shortcuts-dialog");
  const list = dialog.querySelector("dl");
  for (const shortcut of SHORTCUTS) {
    const key = document.createElement("dt");
    const kbd = document.createElement("kbd");
    kbd.textContent = shortcut.keys;
    key.append(kbd);
    const what = document.createElement("dd");
    what.textContent = shortcut.what;
    list.append(key, what);
  }
  const all = { ...actions, showShortcuts: () => dialog.showModal() };
  root.querySelector("#open-shortcuts").addEventListener("click", () => dialog.showModal());
  root.querySelector("#shortcuts-close").addEventListener("click", () => dialog.close());
  document.addEventListener("keydown", (event) => {
    if (!(event.ctrlKey || event.metaKey) || event.altKey) return;
    const shortcut = SHORTCUTS.find((s) => s.action && s.test(event));
    if (!shortcut) return;
    event.preventDefault();
    all[shortcut.action]();
  });
}

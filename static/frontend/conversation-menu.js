// The conversation menu (the header's "Export or share"): export the conversation as Markdown or JSON,
// and share a read-only link to the version shown now, or stop sharing it. On opening it says whether
// a link is live.
import * as http from "./http.js";

// Mounts the menu on `root`, which holds its dialog (#conversation-dialog) and its opener
// (#open-conversation-menu). `conversation()`: the conversation shown, or null before the first
// message. Returns {open(), isOpen()}.
export function mountConversationMenu(root, { conversation }) {
  const find = (selector) => root.querySelector(selector);
  const dialog = find("#conversation-dialog");
  const exportMd = find("#export-md");
  const exportJson = find("#export-json");
  const shareUrl = find("#share-url");
  const shareNote = find("#share-note");
  let serial = 0; // a share action after the dialog opened makes its first reading stale

  function open() {
    const current = conversation();
    dialog.classList.toggle("empty", !current);
    if (current) {
      exportMd.href = "/c/" + current.id + "/export?format=md";
      exportJson.href = "/c/" + current.id + "/export?format=json";
    }
    shareUrl.value = "";
    shareNote.textContent = current ? "" : "Send a message first: there is nothing to export or share yet.";
    dialog.showModal();
    if (current) showLive(current.id);
  }

  async function showLive(id) {
    const asked = ++serial;
    let data;
    try {
      data = await http.get("/c/" + id + "/shares");
    } catch (error) {
      if (asked === serial) shareNote.textContent = error.message;
      return;
    }
    if (asked !== serial) return;
    const [newest] = data.live;
    shareUrl.value = newest ? newest.url : "";
    shareNote.textContent = newest
      ? "Shared: this link is live (made " + new Date(newest.created_at).toLocaleString() + ")."
        + (data.live.length > 1 ? " " + (data.live.length - 1) + " older link(s) work too." : "")
      : "Not shared: no link to this conversation works.";
  }

  async function act(path, done) {
    const current = conversation();
    if (!current) return;
    serial++;
    try {
      done(await http.post("/c/" + current.id + "/" + path));
    } catch (error) {
      shareNote.textContent = error.message;
    }
  }

  find("#open-conversation-menu").addEventListener("click", open);
  find("#share-create").addEventListener("click", () => act("share", (result) => {
    shareUrl.value = result.url;
    shareUrl.select();
    shareNote.textContent = "Shared: anyone with this link sees this version as it is now, read-only.";
  }));
  find("#share-copy").addEventListener("click", () => {
    if (shareUrl.value) navigator.clipboard.writeText(shareUrl.value).catch(() => shareUrl.select());
  });
  find("#share-revoke").addEventListener("click", () => act("unshare", (result) => {
    shareUrl.value = "";
    shareNote.textContent = result.revoked ? "Stopped: its links show nothing any more." : "It was not shared.";
  }));
  find("#conversation-close").addEventListener("click", () => dialog.close());
  return { open, isOpen: () => dialog.open };
}

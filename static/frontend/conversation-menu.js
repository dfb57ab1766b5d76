// The conversation menu (⋯ in the header): export the conversation as Markdown or JSON, and share
// a read-only link to the version shown now, or stop sharing it.
import * as http from "./http.js";

const dialog = document.getElementById("conversation-dialog");
const exportMd = document.getElementById("export-md");
const exportJson = document.getElementById("export-json");
const shareUrl = document.getElementById("share-url");
const shareNote = document.getElementById("share-note");

// `conversation()`: the conversation shown, or null before the first message.
export function setUpConversationMenu({ conversation }) {
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
  }

  async function act(path, done) {
    const current = conversation();
    if (!current) return;
    try {
      done(await http.post("/c/" + current.id + "/" + path));
    } catch (error) {
      shareNote.textContent = error.message;
    }
  }

  document.getElementById("open-conversation-menu").addEventListener("click", open);
  document.getElementById("share-create").addEventListener("click", () => act("share", (result) => {
    shareUrl.value = result.url;
    shareUrl.select();
    shareNote.textContent = "Anyone with this link sees this version as it is now, read-only.";
  }));
  document.getElementById("share-copy").addEventListener("click", () => {
    if (shareUrl.value) navigator.clipboard.writeText(shareUrl.value).catch(() => shareUrl.select());
  });
  document.getElementById("share-revoke").addEventListener("click", () => act("unshare", (result) => {
    shareUrl.value = "";
    shareNote.textContent = result.revoked ? "Stopped: its links show nothing any more." : "It was not shared.";
  }));
  document.getElementById("conversation-close").addEventListener("click", () => dialog.close());
  return { open, isOpen: () => dialog.open };
}

// Documents attached to the conversation (the paperclip): shown as removable chips above the composer. Their
// text opens every turn's prompt; one that does not fit the context window is refused with the numbers.
import { iconButton } from "./icons.js";
import * as http from "./http.js";

// Mounts the chips on `root`, which holds them (#documents), the paperclip (#attach) and its file
// picker (#attach-file). `conversation()`: the one shown, or null; `ensure()`: resolves to
// {conversation, created}, creating it first if needed; `discard(conversation)`: deletes one made for
// an attachment that failed, so no empty "New chat" is left behind; `say(text)`: a line in the status
// bar. Returns {show()}.
export function mountDocuments(root, { conversation, ensure, discard, say }) {
  const chips = root.querySelector("#documents");
  const picker = root.querySelector("#attach-file");

  function chip(document_) {
    const el = document.createElement("span");
    el.className = "chip";
    el.dataset.id = document_.id;
    const name = document.createElement("span");
    name.className = "chip-name";
    name.textContent = document_.name;
    name.title = document_.tokens + " tokens";
    el.append(name, iconButton("chip-remove", "x", "Remove " + document_.name, () => remove(document_, el)));
    return el;
  }

  function show() {
    const current = conversation();
    chips.replaceChildren(...((current && current.documents) || []).map(chip));
  }

  async function remove(document_, el) {
    try {
      await http.post("/c/" + conversation().id + "/documents/" + document_.id + "/remove");
      conversation().documents = conversation().documents.filter((d) => d.id !== document_.id);
      el.remove();
    } catch (error) {
      say(error.message);
    }
  }

  async function upload(file) {
    const { conversation: current, created } = await ensure();
    const form = new FormData();
    form.append("file", file);
    say("Attaching " + file.name + "…");
    const response = await fetch("/c/" + current.id + "/documents", {
      method: "POST", credentials: "same-origin", headers: { "X-CSRFToken": http.csrfToken() }, body: form,
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      if (created && !(current.documents || []).length) await discard(current);
      say((data.error && data.error.detail) || "The document could not be attached.");
      return;
    }
    current.documents = [...(current.documents || []), data];
    chips.append(chip(data));
    say("");
  }

  root.querySelector("#attach").addEventListener("click", () => picker.click());
  picker.addEventListener("change", () => {
    const [file] = picker.files;
    picker.value = "";
    if (file) upload(file).catch((error) => say(error.message));
  });
  show();
  return { show };
}

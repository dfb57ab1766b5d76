// The collections a conversation's questions retrieve from (docs/knowledge.md): the picker beside the
// paperclip lists those the user may read, each with a checkbox, and the chosen ones show as removable
// chips above the composer. Each choice is saved at once (POST /c/<id>/collections), one after another;
// a new chat is made first.
import { icon, iconButton } from "./icons.js";
import * as http from "./http.js";

// Mounts the picker on `root`, which holds its button (#collections-button), its menu
// (#collections-menu, with #collections-options and #collections-empty) and the chips
// (#collection-chips). `available`: the collections the user may read, [{id, name}]; `chosen()`: the ids
// the conversation shown retrieves from; `saved(ids)`: the server holds these now; `ensure()`,
// `discard(conversation)` and `say(text)` as for documents.js. Returns {show(), add(id)}.
export function mountCollections(root, available, { chosen, saved, ensure, discard, say }) {
  const button = root.querySelector("#collections-button");
  const menu = root.querySelector("#collections-menu");
  const options = root.querySelector("#collections-options");
  const chips = root.querySelector("#collection-chips");
  const names = new Map(available.map((c) => [c.id, c.name]));
  let saving = Promise.resolve();

  // Saves `change(ids now)`, after any change still on its way.
  function change(next) {
    saving = saving.then(async () => {
      const { conversation, created } = await ensure();
      try {
        const data = await http.post("/c/" + conversation.id + "/collections", { collections: next(chosen()) });
        saved(data.collections);
        say("");
      } catch (error) {
        if (created) await discard(conversation);
        say(error.message);
      }
      show();
    }).catch((error) => say(error.message));
    return saving;
  }
  const add = (id) => change((ids) => (ids.includes(id) ? ids : [...ids, id]));
  const remove = (id) => change((ids) => ids.filter((other) => other !== id));

  function chip(id) {
    const el = document.createElement("span");
    el.className = "chip collection";
    el.dataset.id = id;
    const name = document.createElement("span");
    name.className = "chip-name";
    name.textContent = names.get(id);
    el.append(icon("library-big"), name,
              iconButton("chip-remove", "x", "Stop answering from " + names.get(id), () => remove(id)));
    return el;
  }

  function option(collection) {
    const item = document.createElement("li");
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = collection.id;
    box.addEventListener("change", () => (box.checked ? add : remove)(collection.id));
    label.append(box, " " + collection.name);
    item.append(label);
    return item;
  }

  // The chips and the menu's checkboxes as the conversation shown has them (the checkboxes stay in
  // place, so the one the keyboard is on keeps the focus).
  function show() {
    const ids = chosen().filter((id) => names.has(id));
    chips.replaceChildren(...ids.map(chip));
    for (const box of options.querySelectorAll("input")) box.checked = ids.includes(Number(box.value));
  }

  const focusable = () => [...menu.querySelectorAll("input, a")];

  function open() {
    show();
    menu.hidden = false;
    button.setAttribute("aria-expanded", "true");
    focusable()[0].focus();
  }

  function close(refocus) {
    if (menu.hidden) return;
    menu.hidden = true;
    button.setAttribute("aria-expanded", "false");
    if (refocus) button.focus();
  }

  button.addEventListener("click", () => (menu.hidden ? open() : close(true)));
  menu.addEventListener("keydown", (event) => {
    const items = focusable();
    const at = items.indexOf(document.activeElement);
    if (event.key === "Escape") close(true);
    else if (event.key === "ArrowDown") items[(at + 1) % items.length].focus();
    else if (event.key === "ArrowUp") items[(at - 1 + items.length) % items.length].focus();
    else return;
    event.preventDefault();
    event.stopPropagation(); // Escape here closes the menu; it does not stop the answer
  });
  // Focus or a click elsewhere closes it.
  const outside = (event) => {
    if (!menu.contains(event.target) && !button.contains(event.target)) close(false);
  };
  root.addEventListener("focusin", outside);
  root.addEventListener("pointerdown", outside);
  options.replaceChildren(...available.map(option));
  root.querySelector("#collections-empty").hidden = available.length > 0;
  show();
  return { show, add };
}

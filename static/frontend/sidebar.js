// The conversation list: newest first, search over the user's conversations (titles
// and message text, through /api/conversations/), rename in place, delete.
import * as http from "./http.js";

const list = document.getElementById("conversation-list");
const search = document.getElementById("search");
const sidebar = document.getElementById("sidebar");
let activeId = null;
let searchTimer = null;
let searchSerial = 0;

function item(id, title) {
  const row = document.createElement("div");
  row.className = "conv" + (id === activeId ? " active" : "");
  row.dataset.id = id;
  const link = document.createElement("a");
  link.className = "conv-link";
  link.href = "/c/" + id + "/";
  link.textContent = title || "New chat";
  row.append(link, iconButton("conv-rename", "Rename", "✎"), iconButton("conv-delete", "Delete", "✕"));
  return row;
}

function iconButton(className, label, icon) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = className;
  button.title = label;
  button.setAttribute("aria-label", label);
  button.textContent = icon;
  return button;
}

function rowFor(id) { return list.querySelector('.conv[data-id="' + id + '"]'); }

function startRename(row) {
  const link = row.querySelector(".conv-link");
  const input = document.createElement("input");
  input.className = "conv-title-input";
  input.value = link.textContent;
  input.maxLength = 200;
  link.hidden = true;
  row.insertBefore(input, link);
  input.focus();
  input.select();
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const title = input.value.trim();
    input.remove();
    link.hidden = false;
    if (!save || !title || title === link.textContent) return;
    try {
      const result = await http.post("/c/" + row.dataset.id + "/rename", { title });
      link.textContent = result.title;
      document.dispatchEvent(new CustomEvent("chat:renamed", { detail: result }));
    } catch (error) {
      window.alert(error.message);
    }
  };
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); finish(true); }
    if (event.key === "Escape") { event.preventDefault(); event.stopPropagation(); finish(false); }
  });
  input.addEventListener("blur", () => finish(true));
}

async function remove(row) {
  const title = row.querySelector(".conv-link").textContent;
  if (!window.confirm('Delete "' + title + '"? This cannot be undone.')) return;
  try {
    await http.post("/c/" + row.dataset.id + "/delete");
  } catch (error) {
    window.alert(error.message);
    return;
  }
  row.remove();
  if (Number(row.dataset.id) === activeId) window.location.assign("/");
}

list.addEventListener("click", (event) => {
  const row = event.target.closest(".conv");
  if (!row) return;
  if (event.target.closest(".conv-rename")) startRename(row);
  else if (event.target.closest(".conv-delete")) remove(row);
});

async function runSearch() {
  const query = search.value.trim();
  const serial = ++searchSerial;
  const url = "/api/conversations/?page_size=100" + (query ? "&search=" + encodeURIComponent(query) : "");
  let data;
  try {
    data = await http.get(url);
  } catch (error) {
    return;
  }
  if (serial !== searchSerial) return; // a newer search has started
  list.replaceChildren(...data.results.map((c) => item(c.id, c.title)));
  list.classList.toggle("searching", Boolean(query));
  if (query && !data.results.length) {
    const empty = document.createElement("p");
    empty.className = "conv-empty";
    empty.textContent = "No conversation matches.";
    list.appendChild(empty);
  }
}

search.addEventListener("input", () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(runSearch, 200);
});
// Typed while the page was still loading, before anything listened.
if (search.value.trim()) runSearch();

document.getElementById("toggle-sidebar").addEventListener("click", (event) => {
  event.stopPropagation();
  sidebar.classList.toggle("open");
});
// At phone width the open sidebar covers the chat; a tap on the chat closes it.
document.querySelector(".chat").addEventListener("click", () => sidebar.classList.remove("open"));

export function setActive(id) {
  activeId = id;
  for (const row of list.querySelectorAll(".conv")) {
    row.classList.toggle("active", Number(row.dataset.id) === id);
  }
}

// A conversation was created or had activity: it moves to the top.
export function touch(id, title) {
  const row = rowFor(id) || item(id, title);
  if (title) row.querySelector(".conv-link").textContent = title;
  list.prepend(row);
  setActive(activeId);
}

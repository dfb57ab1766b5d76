// The conversation list: pinned ones first, then the rest by last activity under Today, Yesterday,
// Previous 7 days and Older. Archived ones leave the list; search (titles and message text, through
// /api/conversations/) finds them too, each result with the text it matched, the match highlighted.
// Every row's actions (pin, rename, archive, delete) are buttons in the tab order, not only on hover.
// Importing it does nothing: chat.js mounts it (mountSidebar) on the page's root.
import * as http from "./http.js";
import { iconButton } from "./icons.js";

const DAY = 24 * 60 * 60 * 1000;

function groupOf(conversation, today) {
  if (conversation.pinned) return "Pinned";
  const age = today - new Date(conversation.updated_at).setHours(0, 0, 0, 0);
  if (age <= 0) return "Today";
  if (age <= DAY) return "Yesterday";
  if (age <= 7 * DAY) return "Previous 7 days";
  return "Older";
}

// `text` as text nodes, each case-insensitive occurrence of `query` in a <mark>.
function highlighted(text, query) {
  const parts = [];
  const lower = text.toLowerCase();
  const needle = query.toLowerCase();
  let from = 0;
  let at;
  while (needle && (at = lower.indexOf(needle, from)) !== -1) {
    parts.push(text.slice(from, at));
    const mark = document.createElement("mark");
    mark.textContent = text.slice(at, at + needle.length);
    parts.push(mark);
    from = at + needle.length;
  }
  parts.push(text.slice(from));
  return parts;
}

function heading(text) {
  const h = document.createElement("h2");
  h.className = "conv-group";
  h.textContent = text;
  return h;
}

// Mounts the sidebar on `root`, the element holding it (#sidebar with its search box, list and status
// line), the header's toggle (#toggle-sidebar) and the chat column (.chat); `listed`: the page's
// listing, newest activity first ({id, title, updated_at, pinned}), from the initial state. Returns what
// the rest of the page tells it: {setActive(id), forget(id), touch(id, title)}.
export function mountSidebar(root, listed) {
  const find = (selector) => root.querySelector(selector);
  const list = find("#conversation-list");
  const search = find("#search");
  const sidebar = find("#sidebar");
  const toggle = find("#toggle-sidebar");
  const status = find("#sidebar-status");
  let conversations = [...(listed || [])];
  let activeId = null;
  let searchTimer = null;
  let searchSerial = 0;
  let results = null; // the search's results while a search is shown

  function item(conversation, query) {
    const row = document.createElement("div");
    row.className = "conv" + (conversation.id === activeId ? " active" : "");
    row.dataset.id = conversation.id;
    const link = document.createElement("a");
    link.className = "conv-link";
    link.href = "/c/" + conversation.id + "/";
    if (conversation.id === activeId) link.setAttribute("aria-current", "page");
    const title = document.createElement("span");
    title.className = "conv-title";
    title.title = conversation.title || "New chat";
    title.append(...highlighted(conversation.title || "New chat", query || ""));
    link.append(title);
    if (conversation.archived) {
      const badge = document.createElement("span");
      badge.className = "conv-badge";
      badge.textContent = "Archived";
      link.append(badge);
    }
    if (query && conversation.snippet) {
      const snippet = document.createElement("span");
      snippet.className = "conv-snippet";
      snippet.append(...highlighted(conversation.snippet, query));
      link.append(snippet);
    }
    const name = conversation.title || "New chat";
    const actions = document.createElement("span");
    actions.className = "conv-actions";
    actions.append(
      conversation.pinned
        ? iconButton("conv-pin", "pin-off", "Unpin " + name)
        : iconButton("conv-pin", "pin", "Pin " + name),
      iconButton("conv-rename", "pencil", "Rename " + name),
      conversation.archived
        ? iconButton("conv-archive", "archive-restore", "Unarchive " + name)
        : iconButton("conv-archive", "archive", "Archive " + name),
      iconButton("conv-delete", "trash-2", "Delete " + name),
    );
    row.append(link, actions);
    return row;
  }

  // Draw the listing (grouped) or the search's results (in their order, unheaded).
  function render() {
    const query = search.value.trim();
    if (results) {
      list.replaceChildren(...results.map((c) => item(c, query)));
      if (!results.length) {
        const empty = document.createElement("p");
        empty.className = "conv-empty";
        empty.textContent = "No conversation matches.";
        list.appendChild(empty);
      }
      list.classList.add("searching");
      return;
    }
    list.classList.remove("searching");
    const today = new Date().setHours(0, 0, 0, 0);
    const groups = new Map([["Pinned", []], ["Today", []], ["Yesterday", []], ["Previous 7 days", []], ["Older", []]]);
    for (const conversation of conversations) groups.get(groupOf(conversation, today)).push(conversation);
    const children = [];
    for (const [name, members] of groups) {
      if (members.length) children.push(heading(name), ...members.map((c) => item(c)));
    }
    list.replaceChildren(...children);
  }

  function rowFor(id) { return list.querySelector('.conv[data-id="' + id + '"]'); }
  function entry(id) {
    return conversations.find((c) => c.id === id) || (results && results.find((c) => c.id === id));
  }
  function say(text) { status.textContent = text; }

  // Redraw, keeping the keyboard where it was: on the same button of the same row when it is still
  // shown, else on the next row's link, else on the search box.
  function redrawKeepingFocus(id, className) {
    const rows = [...list.querySelectorAll(".conv")].map((r) => Number(r.dataset.id));
    const next = rows[rows.indexOf(id) + 1];
    render();
    const target = (rowFor(id) && rowFor(id).querySelector("." + className))
      || (next && rowFor(next) && rowFor(next).querySelector(".conv-link")) || search;
    target.focus();
  }

  function startRename(row) {
    const id = Number(row.dataset.id);
    const link = row.querySelector(".conv-link");
    const current = entry(id).title || "New chat";
    const input = document.createElement("input");
    input.className = "conv-title-input";
    input.value = current;
    input.maxLength = 200;
    input.setAttribute("aria-label", "New title");
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
      if (!save || !title || title === current) { row.querySelector(".conv-rename").focus(); return; }
      try {
        const result = await http.post("/c/" + id + "/rename", { title });
        for (const c of [entry(id), conversations.find((c) => c.id === id)]) if (c) c.title = result.title;
        redrawKeepingFocus(id, "conv-rename");
        document.dispatchEvent(new CustomEvent("chat:renamed", { detail: result }));
      } catch (error) {
        say(error.message);
      }
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") { event.preventDefault(); finish(true); }
      if (event.key === "Escape") { event.preventDefault(); event.stopPropagation(); finish(false); }
    });
    input.addEventListener("blur", () => finish(true));
  }

  async function flag(row, change) {
    const id = Number(row.dataset.id);
    let result;
    try {
      result = await http.post("/c/" + id + "/flags", change);
    } catch (error) {
      say(error.message);
      return;
    }
    const known = entry(id);
    Object.assign(known, result);
    const listed = conversations.find((c) => c.id === id);
    if (result.archived) {
      conversations = conversations.filter((c) => c.id !== id);
    } else if (listed) {
      Object.assign(listed, result);
    } else {
      conversations.push(known);
      conversations.sort((a, b) => new Date(b.updated_at) - new Date(a.updated_at));
    }
    if ("archived" in change) say(result.archived ? "Archived. Search finds it." : "Back in the list.");
    redrawKeepingFocus(id, "archived" in change ? "conv-archive" : "conv-pin");
  }

  async function remove(row) {
    const id = Number(row.dataset.id);
    const title = entry(id).title || "New chat";
    if (!window.confirm('Delete "' + title + '"? This cannot be undone.')) return;
    try {
      await http.post("/c/" + id + "/delete");
    } catch (error) {
      say(error.message);
      return;
    }
    if (id === activeId) { window.location.assign("/"); return; }
    conversations = conversations.filter((c) => c.id !== id);
    if (results) results = results.filter((c) => c.id !== id);
    redrawKeepingFocus(id, "conv-delete");
    say("Deleted.");
  }

  list.addEventListener("click", (event) => {
    const row = event.target.closest(".conv");
    if (!row) return;
    const known = entry(Number(row.dataset.id));
    if (event.target.closest(".conv-rename")) startRename(row);
    else if (event.target.closest(".conv-delete")) remove(row);
    else if (event.target.closest(".conv-pin")) flag(row, { pinned: !known.pinned });
    else if (event.target.closest(".conv-archive")) flag(row, { archived: !known.archived });
  });

  async function runSearch() {
    const query = search.value.trim();
    const serial = ++searchSerial;
    if (!query) { results = null; render(); return; }
    let data;
    try {
      data = await http.get("/api/conversations/?page_size=100&search=" + encodeURIComponent(query));
    } catch (error) {
      return;
    }
    if (serial !== searchSerial) return; // a newer search has started
    results = data.results;
    render();
  }

  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(runSearch, 200);
  });

  function setOpen(open) {
    sidebar.classList.toggle("open", open);
    toggle.setAttribute("aria-expanded", String(open));
  }
  toggle.addEventListener("click", (event) => {
    event.stopPropagation();
    setOpen(!sidebar.classList.contains("open"));
  });
  // At phone width the open sidebar covers the chat; a tap on the chat closes it.
  find(".chat").addEventListener("click", () => setOpen(false));

  function setActive(id) {
    activeId = id;
    for (const row of list.querySelectorAll(".conv")) {
      const active = Number(row.dataset.id) === id;
      row.classList.toggle("active", active);
      const link = row.querySelector(".conv-link");
      if (active) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
  }

  // A conversation was deleted elsewhere on the page.
  function forget(id) {
    conversations = conversations.filter((c) => c.id !== id);
    if (results) results = results.filter((c) => c.id !== id);
    render();
  }

  // A conversation was created or had activity: it moves to the top of its group.
  function touch(id, title) {
    let known = conversations.find((c) => c.id === id);
    if (!known) {
      known = { id, title: title || "", pinned: false };
      conversations.unshift(known);
    }
    if (title) known.title = title;
    known.updated_at = new Date().toISOString();
    conversations = [known, ...conversations.filter((c) => c !== known)];
    if (!results) render();
  }

  render();
  // Typed while the page was still loading, before anything listened.
  if (search.value.trim()) runSearch();
  return { setActive, forget, touch };
}

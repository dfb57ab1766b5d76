// The collections page: make a collection, upload documents to it, watch each being read and indexed
// (a progress bar per collection, a status per document, and why one failed), delete a document or a
// collection, and share one (staff). Everything goes through the collections API with the session;
// while documents wait or are read, the page polls their collections. A collection shows its first page of
// documents, and "Show more documents" adds a page.
import { csrfToken } from "../frontend/http.js";
import { icon, iconButton } from "../frontend/icons.js";

const POLL_MS = 1500;
const VISIBILITY = { private: "Only me", groups: "My groups", site: "Everyone on the site" };
const STATUS = { pending: "Waiting", reading: "Indexing", ready: "Ready", failed: "Failed" };

const initial = JSON.parse(document.getElementById("initial-state").textContent);
const list = document.getElementById("collection-list");
const pageStatus = document.getElementById("page-status");
// Each shown collection: its section's parts, by id.
const shown = new Map();
let polling = null;

// Resolves to the parsed body ({} for 204); rejects with an Error whose message is the server's detail.
async function call(method, url, body) {
  const headers = { "X-CSRFToken": csrfToken() };
  if (body !== undefined && !(body instanceof FormData)) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(body);
  }
  const response = await fetch(url, { method, credentials: "same-origin", headers, body });
  if (response.status === 204) return {};
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error((data.error && data.error.detail) || "Request failed (" + response.status + ")");
  return data;
}

const api = (id, rest) => "/api/collections/" + (id === undefined ? "" : id + "/") + (rest || "");

function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

function size(bytes) {
  if (bytes < 1024) return bytes + " B";
  if (bytes < 1024 * 1024) return (bytes / 1024).toFixed(1) + " KB";
  return (bytes / (1024 * 1024)).toFixed(1) + " MB";
}

function pending(progress) {
  return progress.by_status.pending + progress.by_status.reading > 0;
}

function progressText(p) {
  const parts = [p.by_status.ready + " of " + p.documents + " documents ready"];
  if (p.by_status.failed) parts.push(p.by_status.failed + " failed");
  if (p.chunks_total) parts.push(p.chunks_done + " of " + p.chunks_total + " passages indexed");
  return parts.join(" · ");
}

function describe(c) {
  const who = c.owner === initial.username ? "" : "by " + c.owner + " · ";
  const groups = c.visibility === "groups" && c.groups.length ? ": " + c.groups.join(", ") : "";
  return who + VISIBILITY[c.visibility] + groups + (c.description ? " · " + c.description : "");
}

function documentRow(view, doc) {
  const row = element("tr");
  row.dataset.document = doc.id;
  const name = element("td", "doc-name", doc.name);
  row.append(name, element("td", "doc-status"), element("td", "doc-size", size(doc.size)), element("td", "doc-chunks"));
  const actions = element("td", "doc-actions");
  if (view.summary.may_change) {
    actions.append(iconButton("icon", "trash-2", "Delete " + doc.name, () => deleteDocument(view, doc)));
  }
  row.append(actions);
  return row;
}

function updateRow(row, doc) {
  const status = row.querySelector(".doc-status");
  status.textContent = STATUS[doc.status] || doc.status;
  status.dataset.status = doc.status;
  if (doc.status === "failed" && doc.error) status.append(element("span", "doc-error", ": " + doc.error));
  row.querySelector(".doc-chunks").textContent = doc.chunks_total ? doc.chunks_done + " / " + doc.chunks_total : "–";
}

function showDocuments(view, documents) {
  const seen = new Set();
  for (const doc of documents) {
    seen.add(String(doc.id));
    let row = view.rows.get(String(doc.id));
    if (!row) {
      row = documentRow(view, doc);
      view.rows.set(String(doc.id), row);
      view.tbody.append(row);
    }
    updateRow(row, doc);
  }
  for (const [id, row] of view.rows) {
    if (!seen.has(id)) {
      row.remove();
      view.rows.delete(id);
    }
  }
  view.table.hidden = documents.length === 0;
}

function showSummary(view, summary) {
  view.summary = summary;
  view.title.textContent = summary.name;
  view.about.textContent = describe(summary);
  const p = summary.progress;
  view.bar.max = Math.max(p.documents, 1);
  view.bar.value = p.by_status.ready + p.by_status.failed;
  view.counts.textContent = p.documents ? progressText(p) : "No documents yet.";
  view.section.classList.toggle("indexing", pending(p));
}

function shareForm(view) {
  const form = element("form", "share");
  const label = element("label", "", "Who reads it ");
  const select = element("select");
  select.name = "visibility";
  for (const [value, text] of Object.entries(VISIBILITY)) {
    const option = element("option", "", text);
    option.value = value;
    option.selected = value === view.summary.visibility;
    select.append(option);
  }
  label.append(select);
  const groups = element("fieldset", "share-groups");
  groups.append(element("legend", "", "Groups"));
  for (const name of initial.groups) {
    const box = element("label");
    const input = element("input");
    input.type = "checkbox";
    input.name = "groups";
    input.value = name;
    input.checked = view.summary.groups.includes(name);
    box.append(input, " " + name);
    groups.append(box);
  }
  const showGroups = () => (groups.hidden = select.value !== "groups");
  select.addEventListener("change", showGroups);
  showGroups();
  const save = element("button", "secondary");
  save.append(icon("users"), " Save sharing");
  save.type = "submit";
  form.append(label, groups, save);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = [...form.querySelectorAll("input[name=groups]:checked")].map((box) => box.value);
    const body = { visibility: select.value, groups: select.value === "groups" ? chosen : [] };
    try {
      showSummary(view, await call("PATCH", api(view.summary.id), body));
      say(view, "Sharing saved.");
    } catch (error) {
      say(view, error.message);
    }
  });
  return form;
}

function say(view, text) {
  view.status.textContent = text;
}

function mount(summary) {
  const section = element("section", "collection");
  section.dataset.collection = summary.id;
  const headingId = "collection-" + summary.id;
  section.setAttribute("aria-labelledby", headingId);
  const head = element("div", "collection-head");
  const title = element("h2");
  title.id = headingId;
  head.append(icon("library-big"), title);
  const view = { section, title, rows: new Map(), summary, wanted: initial.documents_page };
  view.about = element("p", "collection-about");
  view.bar = element("progress");
  view.bar.setAttribute("aria-label", "Documents read of " + summary.name);
  view.counts = element("p", "collection-counts");
  view.status = element("p", "collection-status");
  view.status.setAttribute("role", "status");
  view.table = element("table", "documents");
  const headRow = element("tr");
  for (const text of ["Document", "Status", "Size", "Passages"]) headRow.append(element("th", "", text));
  const actionsHead = element("th");
  actionsHead.append(element("span", "visually-hidden", "Actions"));
  headRow.append(actionsHead);
  view.table.append(element("thead"), (view.tbody = element("tbody")));
  view.table.tHead.append(headRow);
  view.table.hidden = true;
  section.append(head, view.about, view.bar, view.counts);
  if (summary.may_change) {
    const tools = element("div", "collection-tools");
    const upload = element("label", "upload button-like");
    const input = element("input", "visually-hidden");
    input.type = "file";
    input.multiple = true;
    input.accept = initial.accept;
    input.addEventListener("change", () => uploadFiles(view, input));
    upload.append(icon("upload"), " Upload documents", input);
    tools.append(upload);
    tools.append(iconButton("secondary", "trash-2", "Delete collection " + summary.name, () => deleteCollection(view), "Delete"));
    section.append(tools);
    if (initial.may_share) section.append(shareForm(view));
  }
  view.more = element("button", "secondary more-documents", "Show more documents");
  view.more.type = "button";
  view.more.hidden = true;
  view.more.addEventListener("click", () => {
    view.wanted += initial.documents_page;
    refresh(view).catch((error) => say(view, error.message));
  });
  section.append(view.status, view.table, view.more);
  showSummary(view, summary);
  shown.set(summary.id, view);
  list.append(section);
  return view;
}

// The first `view.wanted` documents, a page at a time, and whether more follow.
async function documentsOf(view) {
  const documents = [];
  let after = 0;
  while (after !== null && documents.length < view.wanted) {
    const limit = Math.min(view.wanted - documents.length, initial.documents_page_max);
    const page = await call("GET", api(view.summary.id, "documents/?after=" + after + "&limit=" + limit));
    documents.push(...page.documents);
    after = page.next;
  }
  return { documents, more: after !== null };
}

async function refresh(view) {
  const [summary, docs] = await Promise.all([call("GET", api(view.summary.id)), documentsOf(view)]);
  showSummary(view, summary);
  showDocuments(view, docs.documents);
  view.more.hidden = !docs.more;
}

// Poll the collections still indexing, one round after another, until none is.
function poll() {
  if (polling) return;
  polling = setTimeout(async () => {
    polling = null;
    const waiting = [...shown.values()].filter((view) => pending(view.summary.progress));
    try {
      await Promise.all(waiting.map(refresh));
    } catch (error) {
      pageStatus.textContent = error.message;
    }
    if ([...shown.values()].some((view) => pending(view.summary.progress))) poll();
  }, POLL_MS);
}

async function uploadFiles(view, input) {
  const files = [...input.files];
  input.value = "";
  if (!files.length) return;
  const total = files.reduce((sum, file) => sum + file.size, 0);
  if (total > initial.max_upload_bytes) {
    say(view, "The upload is " + size(total) + "; at most " + size(initial.max_upload_bytes) + " at once.");
    return;
  }
  const form = new FormData();
  for (const file of files) form.append("files", file);
  say(view, "Uploading " + files.length + (files.length === 1 ? " file…" : " files…"));
  try {
    const result = await call("POST", api(view.summary.id, "documents/"), form);
    const parts = [result.added.length + " added"];
    if (result.duplicates.length) parts.push("already there: " + result.duplicates.join(", "));
    for (const failed of result.failed) parts.push(failed.name + " failed: " + failed.error);
    say(view, parts.join("; ") + ".");
    await refresh(view);
    poll();
  } catch (error) {
    say(view, "Nothing was added: " + error.message);
  }
}

async function deleteDocument(view, doc) {
  if (!window.confirm("Delete " + doc.name + " and its passages?")) return;
  try {
    await call("DELETE", api(view.summary.id, "documents/" + doc.id + "/"));
    say(view, doc.name + " deleted.");
    await refresh(view);
  } catch (error) {
    say(view, error.message);
  }
}

async function deleteCollection(view) {
  const name = view.summary.name;
  if (!window.confirm("Delete the collection " + name + " with all its documents?")) return;
  try {
    await call("DELETE", api(view.summary.id));
    view.section.remove();
    shown.delete(view.summary.id);
    pageStatus.textContent = name + " deleted.";
    showEmpty();
  } catch (error) {
    say(view, error.message);
  }
}

function showEmpty() {
  document.getElementById("no-collections").hidden = shown.size > 0;
}

document.getElementById("new-collection").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  try {
    const field = (name) => form.elements.namedItem(name).value;
    const made = await call("POST", api(), { name: field("name"), description: field("description") });
    form.reset();
    pageStatus.textContent = "";
    mount(made).title.scrollIntoView({ block: "nearest" });
    showEmpty();
  } catch (error) {
    pageStatus.textContent = error.message;
  }
});

for (const summary of initial.collections) {
  const view = mount(summary);
  if (summary.progress.documents) refresh(view).catch((error) => (pageStatus.textContent = error.message));
}
showEmpty();
poll();

// An answer's sources (docs/knowledge.md): the passages its prompt quoted, listed under it as
// "Sources: [1] handbook.pdf p. 3 …", each opening its passage in place; and the answer's [n] markers
// made links to them. Names and passages reach the page as text nodes only; markers are looked for in
// the text the sanitized Markdown left, outside code and links, and only numbers the answer's sources
// have become links.
import { iconButton } from "./icons.js";

const MARKER = /\[(\d{1,4})\]/g;

function where(source) {
  return source.document_name + (source.page ? " p. " + source.page : "");
}

// The list of answer `id`'s sources, with the passage one of them opens. Returns {element, open(n)}:
// open shows passage n and moves the focus to its source.
export function sourceList(id, sources) {
  const box = document.createElement("div");
  box.className = "sources";
  const heading = document.createElement("span");
  heading.className = "sources-label";
  heading.id = "sources-" + id;
  heading.textContent = "Sources:";
  const list = document.createElement("ul");
  list.setAttribute("aria-labelledby", heading.id);
  const passage = document.createElement("div");
  passage.className = "source-passage";
  passage.id = "passage-" + id;
  passage.setAttribute("role", "region");
  passage.hidden = true;
  const buttons = new Map();
  let shown = null;

  function close() {
    passage.hidden = true;
    if (shown != null) buttons.get(shown).setAttribute("aria-expanded", "false");
    shown = null;
  }

  function show(source) {
    close();
    shown = source.n;
    buttons.get(shown).setAttribute("aria-expanded", "true");
    passage.setAttribute("aria-label", "Source " + source.n + ": " + where(source));
    const head = document.createElement("div");
    head.className = "source-head";
    const name = document.createElement("strong");
    name.textContent = "[" + source.n + "] " + source.document_name;
    head.append(name, source.page ? " · page " + source.page : "");
    head.append(iconButton("source-close", "x", "Close the passage", () => {
      const opener = buttons.get(shown);
      close();
      opener.focus();
    }));
    const text = document.createElement("blockquote");
    text.textContent = source.text;
    passage.replaceChildren(head, text);
    passage.hidden = false;
  }

  for (const source of sources) {
    const item = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.className = "source";
    b.id = "source-" + id + "-" + source.n;
    b.textContent = "[" + source.n + "] " + where(source);
    b.title = "Show the passage";
    b.setAttribute("aria-expanded", "false");
    b.setAttribute("aria-controls", passage.id);
    b.addEventListener("click", () => (shown === source.n ? close() : show(source)));
    buttons.set(source.n, b);
    item.append(b);
    list.append(item);
  }
  box.append(heading, list, passage);

  function open(n) {
    const source = sources.find((s) => s.n === n);
    if (!source) return;
    if (shown !== n) show(source);
    buttons.get(n).focus();
    passage.scrollIntoView({ block: "nearest" });
  }
  return { element: box, open };
}

// Turns each [n] in the rendered answer `body` whose n is one of `sources` into a link to source n
// (answer `id`'s), which `open(n)` shows. Code, code headers and links keep their text.
export function linkMarkers(body, id, sources, open) {
  const numbers = new Set(sources.map((s) => s.n));
  const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) => (node.parentElement.closest("pre, code, a, .codehead")
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
  });
  const texts = [];
  while (walker.nextNode()) texts.push(walker.currentNode);
  for (const node of texts) {
    const parts = [];
    let last = 0;
    for (const match of node.data.matchAll(MARKER)) {
      const n = Number(match[1]);
      if (!numbers.has(n)) continue;
      const link = document.createElement("a");
      link.className = "cite";
      link.href = "#source-" + id + "-" + n;
      link.textContent = match[0];
      link.title = "Source " + n;
      link.addEventListener("click", (event) => { event.preventDefault(); open(n); });
      parts.push(node.data.slice(last, match.index), link);
      last = match.index + match[0].length;
    }
    if (parts.length) node.replaceWith(...parts, node.data.slice(last));
  }
}

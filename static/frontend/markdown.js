// Markdown for answers, safe and incremental.
//
// Safety: markdown-it runs with raw HTML off and images off (model text never loads a
// remote resource), and everything it makes goes through DOMPurify with a short allow
// list before it reaches the page: no script, no event-handler attributes, no URL
// scheme but http(s) and mailto. Links open in a new tab with rel=noopener.
//
// Streaming: a long answer is not re-parsed on every token. Text is cut into blocks at
// blank lines outside fenced code; each finished block is rendered once, and only the
// trailing, still-growing block is rendered again, at most once per animation frame; inside
// an open code block the new text is appended as plain text, without parsing.
// When the answer ends the chat renders it whole once (render), so the result equals a
// plain render.
//
// markdown-it, DOMPurify and highlight.js are the vendored scripts the page loads first.
import { icon } from "./icons.js";

const md = window.markdownit({ html: false, linkify: true, breaks: true });
md.disable("image");

const PURIFY = {
  ALLOWED_TAGS: [
    "a", "p", "br", "hr", "em", "strong", "s", "del", "code", "pre", "blockquote",
    "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
  ],
  ALLOWED_ATTR: ["href", "title", "class", "start"],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
  RETURN_DOM_FRAGMENT: true,
};
window.DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (error) {
    const area = document.createElement("textarea");
    area.value = text;
    document.body.appendChild(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
}

export function copyButton(getText) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.title = "Copy to the clipboard";
  const glyph = icon("copy");
  const label = document.createTextNode(" Copy");
  button.append(glyph, label);
  button.addEventListener("click", async () => {
    await copyText(getText());
    glyph.className = "i i-check";
    label.textContent = " Copied";
    setTimeout(() => { glyph.className = "i i-copy"; label.textContent = " Copy"; }, 1200);
  });
  return button;
}

// Code blocks get a header with their language and a copy button; `highlight`
// colours them (highlight.js escapes what it outputs).
function decorate(fragment, highlight) {
  for (const code of fragment.querySelectorAll("pre > code")) {
    const pre = code.parentElement;
    const language = (/language-([\w+#.-]+)/.exec(code.className) || [])[1] || "";
    if (highlight && window.hljs) {
      if (language && window.hljs.getLanguage(language)) window.hljs.highlightElement(code);
      else code.classList.add("hljs");
    }
    const box = document.createElement("div");
    box.className = "codeblock";
    const head = document.createElement("div");
    head.className = "codehead";
    const label = document.createElement("span");
    label.textContent = language || "code";
    head.append(label, copyButton(() => code.textContent));
    pre.replaceWith(box);
    box.append(head, pre);
  }
  return fragment;
}

function toFragment(text, highlight) {
  return decorate(window.DOMPurify.sanitize(md.render(text), PURIFY), highlight);
}

const FENCE = /^ {0,3}(`{3,}|~{3,})/;

export class StreamRenderer {
  constructor(container) {
    this.container = container;
    this.text = "";
    this.committed = 0; // text before this index is rendered in finished blocks
    this.scanned = 0; // lines before this index have been looked at for block ends
    this.fence = null; // the open fence's marker, e.g. "```"
    this.code = null; // the <pre><code> showing an open code block as it grows
    this.scheduled = false;
    this.onRender = null;
    this.blocks = document.createElement("div");
    this.tail = document.createElement("div");
    container.replaceChildren(this.blocks, this.tail);
  }

  append(delta) {
    this.text += delta;
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => this.flush());
    }
  }

  // Commit every block that ended since the last frame, then redraw the tail.
  flush() {
    this.scheduled = false;
    let newline;
    while ((newline = this.text.indexOf("\n", this.scanned)) !== -1) {
      const start = this.scanned;
      const line = this.text.slice(start, newline);
      this.scanned = newline + 1;
      const fence = FENCE.exec(line);
      if (this.fence === null && fence) {
        // Code may interrupt a paragraph: what came before it is a finished block.
        this.commit(start);
        this.fence = fence[1];
        this.codeStart = this.scanned;
      } else if (this.fence !== null && fence && fence[1][0] === this.fence[0]
                 && fence[1].length >= this.fence.length && !line.slice(fence[0].length).trim()) {
        this.fence = null;
        this.commit(this.scanned);
      } else if (this.fence === null && !line.trim()) {
        this.commit(this.scanned);
      }
    }
    if (this.fence === null) {
      this.tail.replaceChildren(toFragment(this.text.slice(this.committed), false));
    } else {
      this.growCode();
    }
    if (this.onRender) this.onRender();
  }

  // Render the text up to `end` as a finished block, once.
  commit(end) {
    const block = this.text.slice(this.committed, end);
    if (block.trim()) this.blocks.appendChild(toFragment(block, true));
    this.committed = end;
    this.code = null;
  }

  // Inside a code block that is still open, its text is shown as it comes, appended to a
  // <pre><code> as plain text (never parsed, never HTML): a long block costs no re-parsing.
  // It is rendered properly, highlighted, once its closing fence arrives.
  growCode() {
    if (!this.code) {
      const pre = document.createElement("pre");
      this.code = document.createElement("code");
      pre.append(this.code);
      this.tail.replaceChildren(pre);
      this.codeShown = this.codeStart;
    }
    if (this.text.length > this.codeShown) {
      this.code.append(this.text.slice(this.codeShown));
      this.codeShown = this.text.length;
    }
  }
}

export function render(container, text) {
  container.replaceChildren(toFragment(text, true));
}

// A shared snapshot (templates/frontend/shared.html): the messages as the chat draws them, read-only.
// User text as text nodes; answers through markdown.js, which sanitizes.
import { render } from "./markdown.js";

const messages = JSON.parse(document.getElementById("shared-messages").textContent);
const list = document.getElementById("messages");
for (const message of messages) {
  const el = document.createElement("div");
  el.className = "message " + message.role;
  const body = document.createElement("div");
  body.className = "body";
  if (message.role === "assistant") render(body, message.content);
  else body.textContent = message.content;
  el.append(body);
  list.append(el);
}
list.dataset.rendered = String(messages.length);

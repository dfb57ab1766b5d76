// The chat settings dialog: system prompt, temperature and answer length bounds, shown
// with the server's limits. Saving a new chat's settings creates the conversation first.
import * as http from "./http.js";

// Mounts the dialog on `root`, which holds it (#settings-dialog) and its opener (#open-settings);
// `limits`: the server's bounds, from the initial state. `conversation()`: the conversation shown, or
// null; `created(conversation)`: a new one exists; `hasMessages()`: whether it has any (its model is
// then kept). Returns {isOpen()}.
export function mountSettings(root, limits, { conversation, created, hasMessages }) {
  const dialog = root.querySelector("#settings-dialog");
  const form = root.querySelector("#settings-form");
  const error = root.querySelector("#settings-error");

  function open() {
    const current = (conversation() && conversation().settings) || {};
    const defaults = limits.defaults;
    form.system_prompt.value = current.system_prompt != null ? current.system_prompt : defaults.system_prompt;
    form.system_prompt.maxLength = limits.system_prompt_chars;
    for (const name of ["temperature", "max_tokens", "min_tokens"]) {
      const input = form[name];
      input.value = current[name] != null ? current[name] : "";
      if (name in defaults) input.placeholder = "default " + defaults[name];
      input.min = limits[name].min;
      input.max = limits[name].max;
      dialog.querySelector('[data-for="' + name + '"]').textContent = limits[name].min + "–" + limits[name].max;
    }
    // The model: one of those the user may use, chosen before the first message and kept after it.
    form.model.replaceChildren(...limits.models.map((name) => new Option(name, name)));
    form.model.value = current.model || limits.models[0];
    form.model.disabled = hasMessages();
    error.textContent = "";
    dialog.showModal();
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!form.reportValidity()) return;
    const number = (input) => (input.value === "" ? null : Number(input.value));
    const values = {
      system_prompt: form.system_prompt.value,
      temperature: number(form.temperature),
      max_tokens: number(form.max_tokens),
      min_tokens: number(form.min_tokens),
    };
    if (!form.model.disabled) values.model = form.model.value;
    try {
      const shown = conversation();
      if (shown) {
        shown.settings = await http.post("/c/" + shown.id + "/settings", values);
      } else {
        created(await http.post("/c/new", { settings: values }));
      }
      dialog.close();
    } catch (failure) {
      error.textContent = failure.message;
    }
  });
  root.querySelector("#settings-cancel").addEventListener("click", () => dialog.close());
  root.querySelector("#open-settings").addEventListener("click", open);
  return { isOpen: () => dialog.open };
}

// `#` in the composer picks a collection: typing # (at the start or after a space) opens a list of the
// user's collections not chosen yet whose names hold what follows it; the arrow keys move, Enter or Tab
// picks, Escape closes. Picking attaches the collection and takes the #text out of the message.

// Mounts on `root`, which holds the composer's textarea (#prompt) and the list (#collection-suggestions).
// `available`: the collections the user may read, [{id, name}]; `chosen()`: the ids chosen now;
// `pick(id)`: attach that one. Its keys are the textarea's first listeners, so it is mounted before
// the composer's own. Returns {isOpen()}.
export function mountCollectionHash(root, available, { chosen, pick }) {
  const prompt = root.querySelector("#prompt");
  const list = root.querySelector("#collection-suggestions");
  let matches = [];
  let active = 0;
  let typed = null; // the #text before the caret: {start, end, text}

  function find() {
    const end = prompt.selectionStart;
    const match = prompt.selectionEnd === end && /(?:^|\s)#([^\s#]*)$/.exec(prompt.value.slice(0, end));
    return match ? { start: end - match[1].length - 1, end, text: match[1].toLowerCase() } : null;
  }

  function update() {
    typed = find();
    const taken = new Set(chosen());
    matches = typed ? available.filter((c) => !taken.has(c.id) && c.name.toLowerCase().includes(typed.text)) : [];
    active = 0;
    draw();
  }

  function draw() {
    list.hidden = !matches.length;
    list.replaceChildren(...matches.map((collection, i) => {
      const item = document.createElement("li");
      item.id = "collection-suggestion-" + collection.id;
      item.setAttribute("role", "option");
      item.setAttribute("aria-selected", String(i === active));
      item.textContent = collection.name;
      item.addEventListener("mousedown", (event) => { event.preventDefault(); choose(i); });
      return item;
    }));
    if (matches.length) prompt.setAttribute("aria-activedescendant", list.children[active].id);
    else prompt.removeAttribute("aria-activedescendant");
  }

  function close() {
    matches = [];
    draw();
  }

  function choose(i) {
    const { id } = matches[i];
    const before = prompt.value.slice(0, typed.start);
    let after = prompt.value.slice(typed.end);
    if (/\s$/.test(before) && /^\s/.test(after)) after = after.slice(1);
    prompt.value = before + after;
    prompt.setSelectionRange(before.length, before.length);
    close();
    prompt.dispatchEvent(new Event("input"));
    pick(id);
  }

  prompt.addEventListener("keydown", (event) => {
    if (!matches.length) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      active = (active + (event.key === "ArrowDown" ? 1 : -1) + matches.length) % matches.length;
      draw();
    } else if ((event.key === "Enter" || event.key === "Tab") && !event.shiftKey && !event.isComposing) {
      choose(active);
    } else if (event.key === "Escape") {
      close();
    } else {
      return;
    }
    // The composer does not also send, and Escape closes the list without stopping the answer.
    event.preventDefault();
    event.stopImmediatePropagation();
  });
  prompt.addEventListener("input", update);
  // The caret moved: the list follows what is before it now.
  prompt.addEventListener("click", update);
  prompt.addEventListener("keyup", (event) => {
    if (["ArrowLeft", "ArrowRight", "Home", "End"].includes(event.key)) update();
  });
  prompt.addEventListener("blur", close);
  return { isOpen: () => matches.length > 0 };
}

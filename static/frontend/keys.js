// The API keys page: the new key's copy button, and a question before a key is revoked.
const plain = document.getElementById("plain-key");
const copy = document.getElementById("copy-key");
if (plain && copy) {
  copy.hidden = false;
  copy.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(plain.textContent);
      copy.lastChild.textContent = " Copied";
    } catch (error) {
      // No clipboard (an insecure origin, a denied permission): select it for Ctrl+C instead.
      getSelection().selectAllChildren(plain);
      copy.lastChild.textContent = " Selected: press Ctrl+C";
    }
  });
}
for (const form of document.querySelectorAll("form.revoke")) {
  form.addEventListener("submit", (event) => {
    const name = form.dataset.name ? '"' + form.dataset.name + '"' : "this key";
    if (!window.confirm("Revoke " + name + "? Programs using it stop working at once.")) event.preventDefault();
  });
}

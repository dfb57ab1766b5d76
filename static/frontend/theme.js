// The colour theme: "auto" follows the system (prefers-color-scheme), or the user picks dark or
// light. A classic script in <head>, so the page is drawn in its theme from the first paint; the
// switch (#theme) cycles auto → dark → light and remembers the choice in this browser.
"use strict";
(function () {
  const themes = ["auto", "dark", "light"];
  const icons = { auto: "sun-moon", dark: "moon", light: "sun" };
  const stored = localStorage.getItem("theme");
  let theme = themes.includes(stored) ? stored : "auto";
  function apply() {
    if (theme === "auto") document.documentElement.removeAttribute("data-theme");
    else document.documentElement.dataset.theme = theme;
    const button = document.getElementById("theme");
    if (!button) return;
    // An icon button (the chat's sidebar) says its theme in its name and tooltip; a text one in its text.
    const label = "Theme: " + theme;
    const glyph = button.querySelector(".i");
    if (glyph) glyph.className = "i i-" + icons[theme];
    else button.textContent = label;
    button.title = label;
    button.setAttribute("aria-label", label);
  }
  apply();
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("theme");
    if (!button) return;
    apply();
    button.addEventListener("click", () => {
      theme = themes[(themes.indexOf(theme) + 1) % themes.length];
      localStorage.setItem("theme", theme);
      apply();
    });
  });
})();

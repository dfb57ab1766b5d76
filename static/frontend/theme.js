// The colour theme: "auto" follows the system (prefers-color-scheme), or the user picks dark or
// light. A classic script in <head>, so the page is drawn in its theme from the first paint; the
// switch (#theme) cycles auto → dark → light and remembers the choice in this browser.
"use strict";
(function () {
  const themes = ["auto", "dark", "light"];
  const stored = localStorage.getItem("theme");
  let theme = themes.includes(stored) ? stored : "auto";
  function apply() {
    if (theme === "auto") document.documentElement.removeAttribute("data-theme");
    else document.documentElement.dataset.theme = theme;
    const button = document.getElementById("theme");
    if (button) button.textContent = "Theme: " + theme;
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

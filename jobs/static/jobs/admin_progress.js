// Live job progress in the admin: poll the progress endpoint and update the bars in place.
// Text is set with textContent only; nothing from the server is parsed as HTML.
(function () {
  "use strict";
  var ACTIVE = { queued: true, running: true, draft: false };
  var INTERVAL_MS = 2000;

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    seconds = Math.round(seconds);
    if (seconds >= 3600) return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
    if (seconds >= 60) return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
    return seconds + " s";
  }

  function render(element, p) {
    var bar = element.querySelector("progress");
    bar.max = Math.max(p.total, 1);
    bar.value = p.done + p.failed + p.cancelled;
    element.querySelector('[data-field="counts"]').textContent =
      p.done + " done, " + p.failed + " failed of " + p.total;
    element.querySelector('[data-field="rate"]').textContent =
      p.docs_per_minute === null ? "not started" : p.docs_per_minute + " docs/min";
    element.querySelector('[data-field="eta"]').textContent =
      p.eta_seconds === null ? p.status : duration(p.eta_seconds) + " left";
    element.dataset.status = p.status;
  }

  function poll() {
    var elements = Array.prototype.slice.call(document.querySelectorAll("[data-job-progress]"));
    var watched = elements.filter(function (el) { return el.dataset.status === undefined || ACTIVE[el.dataset.status]; });
    if (!watched.length) return;
    var ids = watched.map(function (el) { return el.dataset.jobProgress; });
    var url = watched[0].dataset.progressUrl + "?ids=" + encodeURIComponent(ids.join(","));
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body) return;
        watched.forEach(function (el) {
          var p = body.jobs[el.dataset.jobProgress];
          if (p) render(el, p);
        });
      })
      .catch(function () {})
      .then(function () { window.setTimeout(poll, INTERVAL_MS); });
  }

  document.addEventListener("DOMContentLoaded", function () { window.setTimeout(poll, INTERVAL_MS); });
})();

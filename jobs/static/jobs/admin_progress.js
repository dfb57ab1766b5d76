// Live jobs in the admin: poll the progress endpoint and update the page in place. On the job
// list, each job's status and progress bar; on a job's page also its times and prompt cache, every
// document's state, and which of its actions are enabled. Polling stops once no job on the page
// is queued or running.
// Text is set with textContent only; nothing from the server is parsed as HTML.
(function () {
  "use strict";
  var ACTIVE = { queued: true, running: true };
  var INTERVAL_MS = 2000;

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    seconds = Math.round(seconds);
    if (seconds >= 3600) return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
    if (seconds >= 60) return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
    return seconds + " s";
  }

  function all(selector) {
    return Array.prototype.slice.call(document.querySelectorAll(selector));
  }

  // Every [data-<kind>="<id>"][data-field] cell takes its text from `fields`.
  function fill(kind, id, fields) {
    all("[data-" + kind + '="' + id + '"][data-field]').forEach(function (cell) {
      var text = fields[cell.dataset.field];
      if (text !== undefined) cell.textContent = text;
    });
  }

  function renderProgress(element, p) {
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

  function render(element, id, p) {
    fill("job", id, p.fields);
    all('[data-job="' + id + '"][data-job-action]').forEach(function (button) {
      button.disabled = !p.actions[button.dataset.jobAction];
    });
    (p.documents || []).forEach(function (d) { fill("document", d.id, d.fields); });
    renderProgress(element, p);
  }

  function poll() {
    var elements = all("[data-job-progress]");
    var watched = elements.filter(function (el) { return el.dataset.status === undefined || ACTIVE[el.dataset.status]; });
    if (!watched.length) return;
    var ids = watched.map(function (el) { return el.dataset.jobProgress; });
    var url = watched[0].dataset.progressUrl + "?ids=" + encodeURIComponent(ids.join(","));
    // A job's page (it has the job's action buttons) asks for its documents too.
    var page = document.querySelector("[data-job-action]");
    if (page) url += "&documents=" + encodeURIComponent(page.dataset.job);
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        if (!body) return;
        watched.forEach(function (el) {
          var id = el.dataset.jobProgress;
          if (body.jobs[id]) render(el, id, body.jobs[id]);
        });
      })
      .catch(function () {})
      .then(function () { window.setTimeout(poll, INTERVAL_MS); });
  }

  document.addEventListener("DOMContentLoaded", function () { window.setTimeout(poll, INTERVAL_MS); });
})();

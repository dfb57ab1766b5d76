// Staff dashboard: polls the JSON endpoint and redraws line charts on canvas.
// Each <figure class="chart"> names its series as "path:label,..." where path is
// a field of the JSON ("engine.running"). The first poll also asks for the points recorded
// over the last minutes (?history=1), so the charts open with them; each chart keeps that long.
"use strict";

(function () {
  const root = document.getElementById("dashboard");
  const source = root.dataset.source;
  const refreshMs = Number(root.dataset.refreshMs) || 2000;
  const historySeconds = Number(root.dataset.historySeconds) || 900;
  // A longer silence than a few recording intervals is a gap in the line, not a straight stretch.
  const gapSeconds = 3 * Math.max(Number(root.dataset.sampleSeconds) || 10, refreshMs / 1000);
  const status = document.getElementById("status");
  const historyStatus = document.getElementById("history-status");

  function field(data, path) {
    return path.split(".").reduce((value, key) => (value == null ? null : value[key]), data);
  }

  function format(value) {
    if (value == null) return "–";
    return Number.isInteger(value) ? String(value) : value.toFixed(1);
  }

  function span(seconds) {
    return seconds >= 120 ? `last ${Math.round(seconds / 60)} min` : `last ${Math.round(seconds)} s`;
  }

  // The theme's colours (frontend/chat.css, and the series' in dashboard.css), read at each draw:
  // the theme may have changed.
  function themeColour(name) {
    return getComputedStyle(document.body).getPropertyValue(name).trim();
  }

  class Chart {
    constructor(figure) {
      this.scale = Number(figure.dataset.scale) || 1;
      this.fixedMax = figure.dataset.max ? Number(figure.dataset.max) : null;
      this.series = figure.dataset.series.split(",").map((spec, index) => {
        const [path, label] = spec.split(":");
        return { path, label, colour: `--series-${(index % 4) + 1}`, points: [] };
      });
      const caption = document.createElement("figcaption");
      caption.textContent = figure.dataset.title;
      this.legend = document.createElement("div");
      this.legend.className = "legend";
      this.canvas = document.createElement("canvas");
      this.canvas.width = 480;
      this.canvas.height = 200;
      this.canvas.setAttribute("role", "img");
      this.canvas.setAttribute("aria-label", figure.dataset.title);
      figure.append(caption, this.canvas, this.legend);
      this.figure = figure;
    }

    add(data) {
      for (const s of this.series) {
        const value = field(data, s.path);
        s.points.push({ t: data.time, v: value == null ? null : value * this.scale });
        while (s.points.length && s.points[0].t < data.time - historySeconds) s.points.shift();
      }
    }

    draw() {
      const ctx = this.canvas.getContext("2d");
      const { width, height } = this.canvas;
      const pad = { left: 44, right: 8, top: 8, bottom: 18 };
      ctx.clearRect(0, 0, width, height);
      const all = this.series.flatMap((s) => s.points);
      const values = all.map((p) => p.v).filter((v) => v != null);
      const times = all.map((p) => p.t);
      const maxValue = this.fixedMax ?? Math.max(1, ...values) * 1.1;
      const t0 = Math.min(...times);
      const t1 = Math.max(t0 + 1, ...times);
      const x = (t) => pad.left + ((t - t0) / (t1 - t0)) * (width - pad.left - pad.right);
      const y = (v) => height - pad.bottom - (v / maxValue) * (height - pad.top - pad.bottom);

      ctx.strokeStyle = themeColour("--border");
      ctx.fillStyle = themeColour("--muted");
      ctx.font = "11px system-ui, sans-serif";
      ctx.lineWidth = 1;
      for (let i = 0; i <= 4; i += 1) {
        const v = (maxValue * i) / 4;
        ctx.beginPath();
        ctx.moveTo(pad.left, y(v));
        ctx.lineTo(width - pad.right, y(v));
        ctx.stroke();
        ctx.fillText(format(Math.round(v * 10) / 10), 2, y(v) + 4);
      }
      if (times.length) ctx.fillText(span(t1 - t0), width - 70, height - 4);
      // What is drawn, for a reader of the page's DOM (the tests): points and seconds covered.
      this.figure.dataset.points = String(this.series[0].points.length);
      this.figure.dataset.seconds = times.length ? String(Math.round(t1 - t0)) : "0";

      ctx.lineWidth = 2;
      for (const s of this.series) {
        ctx.strokeStyle = themeColour(s.colour);
        ctx.beginPath();
        let previous = null;
        for (const p of s.points) {
          if (p.v == null) {
            previous = null;
            continue;
          }
          if (previous && p.t - previous.t <= gapSeconds) ctx.lineTo(x(p.t), y(p.v));
          else ctx.moveTo(x(p.t), y(p.v));
          previous = p;
        }
        ctx.stroke();
      }
      this.legend.replaceChildren(
        ...this.series.map((s) => {
          // The series' colour on a swatch; the text in the page's, legible in either theme.
          const item = document.createElement("span");
          const swatch = document.createElement("span");
          const last = s.points.length ? s.points[s.points.length - 1].v : null;
          swatch.className = "swatch";
          swatch.style.background = themeColour(s.colour);
          item.append(swatch, `${s.label}: ${format(last)}`);
          return item;
        }),
      );
    }
  }

  const charts = Array.from(root.querySelectorAll("figure.chart"), (figure) => new Chart(figure));
  function drawCharts() {
    for (const chart of charts) chart.draw();
  }
  // A theme switch (the #theme button, or the system's) redraws at once, not at the next poll.
  new MutationObserver(drawCharts).observe(document.documentElement, { attributeFilter: ["data-theme"] });
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", drawCharts);

  // Rows of text cells; textContent only, as everything the dashboard shows.
  function fillTable(id, rows) {
    const body = document.querySelector(`#${id} tbody`);
    body.replaceChildren(
      ...rows.map((cells) => {
        const row = document.createElement("tr");
        for (const cell of cells) {
          const td = document.createElement("td");
          td.textContent = cell == null ? "–" : String(cell);
          row.append(td);
        }
        return row;
      }),
    );
  }

  function drawHost(host) {
    fillTable(
      "processes",
      host.processes.map((p) => [p.pid, p.name, format(p.cpu_percent), format(p.rss_mib)]),
    );
    const gpus = host.gpus || [];
    document.getElementById("gpus").hidden = host.gpus == null;
    document.getElementById("no-gpu").hidden = host.gpus != null;
    fillTable(
      "gpus",
      gpus.map((g) => [`${g.index}: ${g.name}`, g.utilisation_percent, `${g.memory_used_mib} / ${g.memory_total_mib}`, g.temperature_c]),
    );
  }
  function percent(share) {
    return share == null ? null : format(share * 100);
  }

  function drawReplicas(replicas) {
    fillTable(
      "replicas",
      replicas.map((r) => [
        r.up ? r.url : `${r.url} (unreachable: ${r.error})`,
        r.healthy == null ? null : r.healthy ? "yes" : "no",
        format(r.running),
        format(r.waiting),
        percent(r.kv_cache_usage),
        percent(r.prefix_cache_hit_rate),
        format(r.tokens_per_second),
        format(r.ttft_p50_ms),
      ]),
    );
  }
  const tiles = Array.from(root.querySelectorAll("[data-field]"));

  function showHistory(points) {
    for (const point of points) for (const chart of charts) chart.add(point);
    root.dataset.historyPoints = String(points.length);
    historyStatus.textContent = points.length
      ? `History: ${points.length} points since ${new Date(points[0].time * 1000).toLocaleTimeString()}.`
      : "History: nothing recorded in the last minutes (is Celery beat running?).";
  }

  // The first poll asks for the history too; Redis failing it is said, and the charts start now.
  async function load(withHistory) {
    const url = withHistory ? `${source}?history=1` : source;
    const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (withHistory && response.status === 503) {
      const body = await response.json();
      historyStatus.textContent = `No history: ${body.error.detail}`;
      historyStatus.classList.add("error");
      return load(false);
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const data = await response.json();
    if (withHistory) showHistory(data.history);
    return data;
  }

  let historyLoaded = false;

  async function poll() {
    try {
      const data = await load(!historyLoaded);
      historyLoaded = true;
      for (const chart of charts) chart.add(data);
      drawCharts();
      drawHost(data.host);
      drawReplicas(data.replicas);
      for (const tile of tiles) {
        tile.textContent = tile.dataset.field
          .split(",")
          .map((path) => format(field(data, path)))
          .join(" / ");
      }
      const engine = data.engine.up ? "engine up" : `engine unreachable (${data.engine.error})`;
      const covered = data.window_seconds == null ? "since start" : `over the last ${data.window_seconds} s`;
      status.textContent = `Updated ${new Date(data.time * 1000).toLocaleTimeString()}, ${covered}; ${engine}.`;
      root.dataset.updates = String(Number(root.dataset.updates || 0) + 1);
    } catch (error) {
      status.textContent = `Could not load figures: ${error.message}`;
    } finally {
      window.setTimeout(poll, refreshMs);
    }
  }

  poll();
})();

// Staff dashboard: polls the JSON endpoint and redraws line charts on canvas.
// Each <figure class="chart"> names its series as "path:label,..." where path is
// a field of the JSON ("engine.running"); the history lives only in this page.
"use strict";

(function () {
  const root = document.getElementById("dashboard");
  const source = root.dataset.source;
  const refreshMs = Number(root.dataset.refreshMs) || 2000;
  const historyLength = 150;
  const colours = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];
  const status = document.getElementById("status");

  function field(data, path) {
    return path.split(".").reduce((value, key) => (value == null ? null : value[key]), data);
  }

  function format(value) {
    if (value == null) return "–";
    return Number.isInteger(value) ? String(value) : value.toFixed(1);
  }

  class Chart {
    constructor(figure) {
      this.scale = Number(figure.dataset.scale) || 1;
      this.fixedMax = figure.dataset.max ? Number(figure.dataset.max) : null;
      this.series = figure.dataset.series.split(",").map((spec, index) => {
        const [path, label] = spec.split(":");
        return { path, label, colour: colours[index % colours.length], points: [] };
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
    }

    push(data) {
      for (const s of this.series) {
        const value = field(data, s.path);
        s.points.push({ t: data.time, v: value == null ? null : value * this.scale });
        if (s.points.length > historyLength) s.points.shift();
      }
      this.draw();
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

      ctx.strokeStyle = "#d4d4d8";
      ctx.fillStyle = "#52525b";
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
      ctx.fillText(`last ${Math.round(t1 - t0)} s`, width - 70, height - 4);

      ctx.lineWidth = 2;
      for (const s of this.series) {
        ctx.strokeStyle = s.colour;
        ctx.beginPath();
        let drawing = false;
        for (const p of s.points) {
          if (p.v == null) {
            drawing = false;
            continue;
          }
          if (drawing) ctx.lineTo(x(p.t), y(p.v));
          else ctx.moveTo(x(p.t), y(p.v));
          drawing = true;
        }
        ctx.stroke();
      }
      this.legend.replaceChildren(
        ...this.series.map((s) => {
          const item = document.createElement("span");
          const last = s.points.length ? s.points[s.points.length - 1].v : null;
          item.style.color = s.colour;
          item.textContent = `${s.label}: ${format(last)}`;
          return item;
        }),
      );
    }
  }

  const charts = Array.from(root.querySelectorAll("figure.chart"), (figure) => new Chart(figure));

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

  async function poll() {
    try {
      const response = await fetch(source, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const data = await response.json();
      for (const chart of charts) chart.push(data);
      drawHost(data.host);
      drawReplicas(data.replicas);
      for (const tile of tiles) {
        tile.textContent = tile.dataset.field
          .split(",")
          .map((path) => format(field(data, path)))
          .join(" / ");
      }
      const engine = data.engine.up ? "engine up" : `engine unreachable (${data.engine.error})`;
      const span = data.window_seconds == null ? "since start" : `over the last ${data.window_seconds} s`;
      status.textContent = `Updated ${new Date(data.time * 1000).toLocaleTimeString()}, ${span}; ${engine}.`;
      root.dataset.updates = String(Number(root.dataset.updates || 0) + 1);
    } catch (error) {
      status.textContent = `Could not load figures: ${error.message}`;
    } finally {
      window.setTimeout(poll, refreshMs);
    }
  }

  poll();
})();

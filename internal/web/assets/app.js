// app.js: loads the data (inlined in the HTML file, or from the server),
// builds the views and keeps them linked: one selected function, one
// thread scope and one metric for all of them.
(function () {
"use strict";
const TP = window.TP;

TP.App = class App {
  constructor(data) {
    const t0 = performance.now();
    this.model = new TP.Model(data);
    this.bus = new TP.Bus();
    this.state = { scope: data.selection ? "sel" : "all", metric: 0, selected: null };
    this.activeTab = "graph";
    this.header();
    this.table = new TP.Table(this);
    this.detail = new TP.Detail(this);
    this.graph = new TP.Graph(this);
    this.flame = new TP.Flame(this);
    this.source = new TP.Source(this);
    this.timeline = new TP.Timeline(this);
    this.tabs();
    this.table.refresh();
    this.graph.reset();
    const rows = this.table.rows;
    this.select(rows.length ? rows[0] : null, "init");
    this.render();
    document.body.dataset.initMs = (performance.now() - t0).toFixed(1);
    // "tp-rendered": the page is drawn, on Chromium's clock from the
    // start of navigation (bench/webload reads it over DevTools).
    performance.mark("tp-rendered");
    document.body.dataset.ready = "1";
  }

  agg() { return this.model.aggregate(this.state.scope); }
  metricInfo() { return this.model.data.metrics[this.state.metric]; }

  // header fills the summary, warnings and the scope and metric selectors.
  header() {
    const d = this.model.data, h = d.header || {};
    const kind = d.kind === "instrumented" ? `instrumented (${h.instrument || "probes"})` : `sampling ${h.event || ""}`;
    document.getElementById("summary").textContent =
      `${kind} · ${d.threads.length} threads · ${this.model.nfuncs.toLocaleString("en-US")} functions` + (h.start_time ? " · " + h.start_time : "") +
      (h.granularity || h.no_inlines ? ` · grouped by ${h.granularity || "functions"}${h.no_inlines ? ", inlined code charged to its caller" : ""}` : "");
    const warn = document.getElementById("warnings");
    warn.replaceChildren(...(h.warnings || []).map((w) => TP.el("li", {}, "WARNING: " + w)));
    const scope = document.getElementById("scope");
    const opts = [TP.el("option", { value: "all" }, "all threads")];
    if (d.selection) opts.unshift(TP.el("option", { value: "sel" }, `${d.selection.label} (${d.selection.threads.length} of ${d.threads.length} threads)`));
    for (const p of d.processes) opts.push(TP.el("option", { value: "p:" + p.pid }, `process ${p.name || "[unknown]"}_${p.pid}`));
    d.threads.forEach((t, i) => opts.push(TP.el("option", { value: "t:" + i }, `  thread ${t.name}_${t.tid}` + (t.start ? ` (started ${((t.start - d.timeline.first) / 1e6).toFixed(1)} ms)` : ""))));
    scope.replaceChildren(...opts);
    scope.value = this.state.scope;
    scope.addEventListener("change", () => this.setScope(scope.value));
    const metric = document.getElementById("metric");
    metric.replaceChildren(...d.metrics.map((mi, i) => TP.el("option", { value: i }, mi.label)));
    metric.addEventListener("change", () => this.setMetric(+metric.value));
  }

  tabs() {
    for (const b of document.querySelectorAll("#tabs button")) {
      b.addEventListener("click", () => this.showTab(b.dataset.tab));
    }
  }

  showTab(name) {
    this.activeTab = name;
    for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === name);
    for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.id === "tab-" + name);
    this.render();
  }

  // render draws the active tab if its inputs changed.
  render() {
    ({ graph: this.graph, flame: this.flame, source: this.source, timeline: this.timeline })[this.activeTab].render();
  }

  // select makes f the selected function in every view.
  select(f, origin) {
    this.state.selected = f;
    document.body.dataset.selected = f === null ? "" : f;
    if (origin !== "table") this.table.reveal(f);
    else this.table.renderRows(true);
    this.detail.render(f);
    this.graph.highlight(f);
    this.flame.highlight(f);
    this.source.invalidate();
    this.bus.emit("select", f, origin);
  }

  setScope(scope) {
    this.state.scope = scope;
    document.getElementById("scope").value = scope;
    this.changed();
  }

  setMetric(m) {
    this.state.metric = m;
    document.getElementById("metric").value = m;
    this.changed();
  }

  // changed redraws everything after a scope or metric change.
  changed() {
    this.table.refresh();
    this.detail.render(this.state.selected);
    this.graph.reset();
    this.flame.invalidate();
    this.source.invalidate();
    this.timeline.invalidate();
    this.render();
  }
};

// load finds the data: inlined (HTML file) or at the server's data URL.
async function load() {
  const status = document.getElementById("status");
  const inline = document.getElementById("tp-data");
  try {
    let data;
    if (inline) data = JSON.parse(inline.textContent);
    else {
      status.textContent = "loading…";
      const cfg = JSON.parse(document.getElementById("tp-config").textContent);
      const r = await fetch(cfg.dataURL);
      if (!r.ok) throw new Error(`${cfg.dataURL}: ${r.status} ${await r.text()}`);
      data = await r.json();
    }
    status.textContent = "";
    TP.app = new TP.App(data);
  } catch (err) {
    status.textContent = "error: " + err.message;
    document.body.dataset.error = err.message;
    throw err;
  }
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", load);
else load();
})();

// timeline.js: one row per thread incarnation on a common time axis:
// its lifetime, when it was on a CPU (context switches, when recorded),
// and how many samples (orange) and function events (blue) fell in each
// interval. Clicking a row selects that thread everywhere.
(function () {
"use strict";
const TP = window.TP;
const NS = "http://www.w3.org/2000/svg";
const ROW = 34, LABEL = 170, AXIS = 24;

function s(tag, attrs, ...kids) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}

TP.Timeline = class Timeline {
  constructor(app) {
    this.app = app;
    this.el = document.getElementById("timeline");
    this.dirty = true;
    this.el.addEventListener("click", (e) => {
      const r = e.target.closest("g.row");
      if (r) app.setScope("t:" + r.dataset.thread);
    });
    // As the flame graph: redraw for a new width, not for being shown.
    new ResizeObserver(() => { if (this.el.clientWidth !== this.width) this.invalidate(); }).observe(this.el);
  }

  invalidate() {
    this.dirty = true;
    if (this.app.activeTab === "timeline") this.render();
  }

  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const m = this.app.model, d = m.data, tl = d.timeline;
    this.width = this.el.clientWidth;
    const width = Math.max(500, this.width - 10);
    const plot = width - LABEL - 10;
    const span = tl.last - tl.first || 1;
    const x = (t) => LABEL + Math.max(0, Math.min(1, (t - tl.first) / span)) * plot;
    const bw = plot / tl.bins;
    const mask = this.app.agg().mask;
    const svg = s("svg", { width, height: AXIS + d.threads.length * ROW + 4, id: "timeline-svg" });
    // Axis: ticks at round milliseconds.
    const step = niceStep(span / 1e6 / 8);
    for (let ms = 0; ms <= span / 1e6; ms += step) {
      const px = x(tl.first + ms * 1e6);
      svg.append(s("line", { x1: px, x2: px, y1: AXIS - 4, y2: AXIS + d.threads.length * ROW, stroke: "#eceff2" }),
        s("text", { x: px, y: AXIS - 8, "text-anchor": "middle", fill: "#68737d" }, `${+ms.toFixed(3)} ms`));
    }
    d.threads.forEach((t, i) => {
      const y = AXIS + i * ROW;
      const g = s("g", { class: "row" + (mask[i] && this.app.state.scope !== "all" ? " selected" : ""), "data-thread": i, "data-tid": t.tid });
      g.append(s("rect", { class: "bg", x: 0, y, width, height: ROW - 2, fill: i % 2 ? "#fafbfc" : "#fff" }));
      g.append(s("text", { x: 4, y: y + 13 }, `${m.threadName(i)}`));
      g.append(s("text", { x: 4, y: y + 27, fill: "#68737d" }, `pid ${t.pid}` + (t.start ? ` · from ${fmtMS(t.start - tl.first)}` : "") + (t.end ? ` · to ${fmtMS(t.end - tl.first)}` : "")));
      const from = t.start && t.start > tl.first ? t.start : tl.first, to = t.end && t.end < tl.last ? t.end : tl.last;
      g.append(s("rect", { x: x(from), y: y + 14, width: Math.max(1, x(to) - x(from)), height: 4, fill: "#cfd8e3" }, s("title", {}, "lifetime")));
      for (const [a, b] of tl.running[i]) {
        g.append(s("rect", { class: "run", x: x(a), y: y + 14, width: Math.max(0.5, x(b) - x(a)), height: 4, fill: "#2b8a3e" }));
      }
      const smp = tl.samples[i], ev = tl.events[i];
      const maxS = Math.max(1, ...smp), maxE = Math.max(1, ...ev);
      smp.forEach((c, k) => {
        if (!c) return;
        const h = 12 * c / maxS;
        g.append(s("rect", { class: "smp", x: LABEL + k * bw, y: y + 13 - h, width: Math.max(1, bw - 0.3), height: h, fill: "#e8590c" }, s("title", {}, `${c} samples`)));
      });
      ev.forEach((c, k) => {
        if (!c) return;
        const h = 12 * c / maxE;
        g.append(s("rect", { class: "evt", x: LABEL + k * bw, y: y + 19, width: Math.max(1, bw - 0.3), height: h, fill: "#1f6feb" }, s("title", {}, `${c} events`)));
      });
      svg.append(g);
    });
    this.el.replaceChildren(svg);
    this.el.dataset.threads = d.threads.length;
  }
};

function niceStep(x) {
  if (!(x > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  for (const k of [1, 2, 5, 10]) if (k * p >= x) return k * p;
  return 10 * p;
}

function fmtMS(ns) { return +(ns / 1e6).toFixed(3) + " ms"; }
})();

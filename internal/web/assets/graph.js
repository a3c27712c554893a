// graph.js: the call graph as a river of time (docs/architecture.md).
// Nodes are functions, arcs caller→callee; an arc's width follows the
// callee's cum time in calls from that caller, relative to the (virtual)
// root, with no, linear or logarithmic weighting. A time filter (0-20%)
// hides arcs below it; its initial value is chosen so that about 30
// functions show. Each node steps through three states: collapsed,
// children that pass the filter, all children. Graphviz (dot, compiled
// to WebAssembly and embedded) does the layout.
(function () {
"use strict";
const TP = window.TP;

const COLLAPSED = 0, FILTERED = 1, ALL = 2;
const STATE_MARK = ["▶", "◐", "▷"]; // filled, partly filled, open arrowhead
const STATE_NAME = ["collapsed", "filtered", "all"];
const MAX_NODES = 400; // beyond this the layout gets slow and unreadable
const TARGET = 30; // functions shown at the initial time filter

// arcWidth converts T, the arc's share of the root's time (0..1), to a
// line width in points.
TP.arcWidth = function arcWidth(T, weighting) {
  switch (weighting) {
    case "none": return 1;
    case "linear": return Math.max(1, Math.min(10, Math.ceil(T * 10 - 1e-9)));
    default: return Math.min(9, Math.max(1, Math.log2(1000 * T + 0.0001)));
  }
};

// initialFilter picks the time filter (percent, 0.1 steps, 0..20) at
// which about TARGET functions qualify: the TARGET-th largest total,
// rounded up to the next step. When many functions tie
// around that value (flat profiles), it steps up until at most twice
// TARGET qualify, rather than lay out hundreds.
TP.initialFilter = function initialFilter(totals, rootTotal) {
  const v = Array.from(totals).filter((x) => x > 0).sort((a, b) => b - a);
  if (v.length <= TARGET || rootTotal <= 0) return 0;
  const count = (pct) => {
    const min = pct / 100 * rootTotal * (1 - 1e-12);
    let lo = 0, hi = v.length; // v is descending: count those >= min
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (v[mid] >= min) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  let f = Math.min(20, Math.ceil(100 * v[TARGET - 1] / rootTotal * 10 - 1e-9) / 10);
  while (f < 20 && count(f) > 2 * TARGET) f = Math.round(f * 10 + 1) / 10;
  return f;
};

TP.Graph = class Graph {
  constructor(app) {
    this.app = app;
    this.view = document.getElementById("graph-view");
    this.overview = document.getElementById("graph-overview");
    this.info = document.getElementById("graph-info");
    this.slider = document.getElementById("graph-filter");
    this.num = document.getElementById("graph-filter-num");
    this.weightEl = document.getElementById("graph-weight");
    this.state = new Map(); // function → COLLAPSED | FILTERED | ALL
    this.root = TP.ROOT;
    this.filter = 0;
    this.weighting = this.weightEl.value;
    this.dirty = true;
    this.renders = 0;
    this.slider.addEventListener("input", () => this.setFilter(+this.slider.value));
    this.num.addEventListener("change", () => this.setFilter(+this.num.value));
    this.weightEl.addEventListener("change", () => { this.weighting = this.weightEl.value; this.invalidate(); });
    document.getElementById("graph-collapse").addEventListener("click", () => this.step(app.state.selected, -1));
    document.getElementById("graph-expand").addEventListener("click", () => this.step(app.state.selected, +1));
    document.getElementById("graph-root").addEventListener("click", () => this.setRoot(app.state.selected));
    document.getElementById("graph-unroot").addEventListener("click", () => this.setRoot(TP.ROOT));
    document.getElementById("graph-fit").addEventListener("click", () => this.fit());
    this.view.addEventListener("click", (e) => {
      if (this.dragged) return;
      const g = e.target.closest("g.node");
      if (g && g.dataset.f !== undefined) app.select(+g.dataset.f, "graph");
    });
    this.view.addEventListener("dblclick", (e) => {
      const g = e.target.closest("g.node");
      if (g) this.step(+g.dataset.f, +1, true);
    });
    this.installPanZoom();
    this.overview.addEventListener("click", (e) => this.overviewClick(e));
  }

  // reset is called when the scope or metric changes: the filter goes
  // back to its initial value for the new numbers.
  reset() {
    const agg = this.app.agg(), met = this.app.state.metric;
    this.setFilter(TP.initialFilter(agg.total[met], this.rootTotal()), true);
    this.invalidate();
  }

  setFilter(v, quiet) {
    v = Math.max(0, Math.min(20, Math.round(v * 10) / 10 || 0));
    this.filter = v;
    this.slider.value = v;
    this.num.value = v;
    if (!quiet) this.invalidate();
  }

  setRoot(f) {
    if (f === null || f === undefined) return;
    this.root = f;
    this.invalidate();
  }

  // step moves a node one detail level up (+1) or down (-1); cycle wraps
  // from all back to collapsed (double click).
  step(f, dir, cycle) {
    if (f === null || f === undefined) return;
    let s = this.stateOf(f) + dir;
    if (cycle && s > ALL) s = COLLAPSED;
    this.state.set(f, Math.max(COLLAPSED, Math.min(ALL, s)));
    this.invalidate();
  }

  stateOf(f) { return this.state.has(f) ? this.state.get(f) : FILTERED; }

  rootTotal() {
    const met = this.app.state.metric;
    return this.app.model.total(this.root, this.app.state.scope, met);
  }

  invalidate() {
    this.dirty = true;
    if (this.app.activeTab === "graph") this.render();
  }

  // visible walks from the root: a node shows the children its state
  // allows; the walk stops at MAX_NODES. An arc's T is the callee's cum
  // in calls from the caller (Model.graphArcs) over the root's total.
  visible() {
    const m = this.app.model, scope = this.app.state.scope, met = this.app.state.metric;
    const rootTotal = this.rootTotal();
    const nodes = new Map([[this.root, { f: this.root, kids: 0 }]]);
    const arcs = [];
    const queue = [this.root];
    let truncated = false;
    while (queue.length) {
      const f = queue.shift();
      const callees = m.graphArcs(f, scope).sort((a, b) => b.cum[met] - a.cum[met]);
      nodes.get(f).kids = callees.length;
      const st = this.stateOf(f);
      for (const a of callees) {
        const T = rootTotal > 0 ? a.cum[met] / rootTotal : 0;
        // Filtered shows arcs at or above the filter that carry time: at 0%
        // every arc with time; arcs without any only in the all state.
        if (st === COLLAPSED || (st === FILTERED && (100 * T < this.filter || a.cum[met] <= 0))) continue;
        if (!nodes.has(a.func)) {
          if (nodes.size >= MAX_NODES) { truncated = true; continue; }
          nodes.set(a.func, { f: a.func, kids: 0 });
          queue.push(a.func);
        }
        arcs.push({ from: f, to: a.func, T, arc: a });
      }
    }
    return { nodes, arcs, truncated, rootTotal };
  }

  dot(vis) {
    const m = this.app.model, met = this.app.state.metric;
    const agg = this.app.agg(), unit = this.app.metricInfo().unit;
    const id = (f) => (f === TP.ROOT ? "root" : "f" + f);
    const lines = [
      "digraph callgraph {",
      'graph [rankdir=TB, nodesep=0.25, ranksep=0.4, bgcolor="transparent", fontname="Helvetica"];',
      'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, margin="0.08,0.03", color="#6b7785"];',
      'edge [arrowsize=0.6, color="#5a6b7b", fontname="Helvetica", fontsize=8];',
    ];
    for (const { f, kids } of vis.nodes.values()) {
      const total = f === TP.ROOT ? vis.rootTotal : agg.total[met][f];
      const self = f === TP.ROOT ? 0 : agg.self[met][f];
      const mark = kids > 0 ? STATE_MARK[this.stateOf(f)] + " " : "";
      let name = f === TP.ROOT ? "<all threads>" : m.name(f);
      if (name.length > 40) name = name.slice(0, 38) + "…";
      const rec = f !== TP.ROOT && m.recursive[f] ? " ↻" : "";
      // Node labels use the selected threads' total, as the table does
      // (a function under a virtual root may also run outside it); arc
      // widths are relative to the root.
      const pct = agg.rootTotal[met] > 0 ? (100 * total / agg.rootTotal[met]).toFixed(1) + "%" : "";
      const label = `${mark}${name}${rec}\n${pct} ${TP.fmtValue(total, unit)}` + (self > 0 ? ` (self ${TP.fmtValue(self, unit)})` : "");
      const attrs = [
        `id="n${f === TP.ROOT ? "root" : f}"`,
        `label=${q(label)}`,
        `tooltip=${q((f === TP.ROOT ? "" : m.name(f) + " (" + m.module(f) + ")\n") + "state: " + STATE_NAME[this.stateOf(f)])}`,
        `fillcolor="${TP.heat(agg.rootTotal[met] > 0 ? self / agg.rootTotal[met] * 3 : 0)}"`,
        `class="${["st-" + STATE_NAME[this.stateOf(f)], rec ? "recursive" : "", kids ? "" : "leaf"].join(" ").trim()}"`,
      ];
      if (rec) attrs.push("peripheries=2");
      if (f === this.root) attrs.push('shape=house, color="#1f6feb", penwidth=2');
      lines.push(`${id(f)} [${attrs.join(", ")}];`);
    }
    for (const a of vis.arcs) {
      const w = TP.arcWidth(a.T, this.weighting);
      const calls = m.instrumented ? TP.fmtValue(a.arc.calls, "count") + " calls, " : "";
      lines.push(`${id(a.from)} -> ${id(a.to)} [id="e${a.from}_${a.to}", penwidth=${w.toFixed(2)}, ` +
        `tooltip=${q(`${m.name(a.from)} → ${m.name(a.to)}: ${calls}${TP.fmtValue(a.arc.cum[met], unit)} (${(100 * a.T).toFixed(2)}%)`)}, ` +
        `class="w${Math.round(w)}"];`);
    }
    lines.push("}");
    return lines.join("\n");
  }

  // render lays the visible graph out with Graphviz and shows it.
  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const vis = this.visible();
    const dot = this.dot(vis);
    this.lastDot = dot;
    const seq = ++this.renders;
    this.info.textContent = `${vis.nodes.size} functions, ${vis.arcs.length} arcs` + (vis.truncated ? ` (limited to ${MAX_NODES}: raise the filter)` : "");
    TP.viz().then((viz) => {
      if (seq !== this.renders) return; // a newer render started
      const t0 = performance.now();
      const svg = viz.renderSVGElement(dot);
      this.layoutMS = performance.now() - t0;
      this.show(svg, vis);
    }).catch((err) => {
      this.view.replaceChildren(TP.el("pre", {}, "Graph layout failed: " + err));
    });
  }

  show(svg, vis) {
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    for (const g of svg.querySelectorAll("g.node")) {
      const id = g.id.slice(1);
      g.dataset.f = id === "root" ? TP.ROOT : id;
      g.dataset.name = id === "root" ? "<root>" : this.app.model.name(+id);
      g.dataset.state = STATE_NAME[this.stateOf(+g.dataset.f)];
    }
    const vb = svg.viewBox.baseVal;
    this.full = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
    this.svg = svg;
    this.view.replaceChildren(svg);
    this.view.dataset.nodes = vis.nodes.size;
    this.view.dataset.arcs = vis.arcs.length;
    this.view.dataset.filter = this.filter;
    this.view.dataset.weighting = this.weighting;
    this.view.dataset.root = this.root;
    this.view.dataset.renders = this.renders;
    const ov = svg.cloneNode(true);
    ov.removeAttribute("id");
    for (const e of ov.querySelectorAll("[id]")) e.removeAttribute("id");
    this.ovRect = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    this.ovRect.setAttribute("class", "viewport");
    ov.append(this.ovRect);
    this.ovSVG = ov;
    this.overview.replaceChildren(ov);
    this.vb = { ...this.full };
    this.highlight(this.app.state.selected);
    this.applyViewBox();
  }

  // highlight marks the selected function and its shown callers and
  // callees, and centres it when it is off screen.
  highlight(f) {
    if (!this.svg) return;
    for (const g of this.svg.querySelectorAll("g.node.selected, g.node.near")) g.classList.remove("selected", "near");
    const g = this.svg.querySelector(`g.node[data-f="${f}"]`);
    if (!g) {
      this.view.dataset.selectedShown = "false";
      return;
    }
    this.view.dataset.selectedShown = "true";
    g.classList.add("selected");
    for (const e of this.svg.querySelectorAll("g.edge")) {
      const [a, b] = e.id.slice(1).split("_");
      if (+a === f) this.svg.querySelector(`g.node[data-f="${b}"]`)?.classList.add("near");
      if (+b === f) this.svg.querySelector(`g.node[data-f="${a}"]`)?.classList.add("near");
    }
    const bb = g.getBBox();
    const ctm = g.getCTM(), rootCTM = this.svg.getCTM();
    if (ctm && rootCTM) {
      // Centre of the node in the svg's user space (viewBox units).
      const p = this.svg.createSVGPoint();
      p.x = bb.x + bb.width / 2;
      p.y = bb.y + bb.height / 2;
      const q = p.matrixTransform(rootCTM.inverse().multiply(ctm));
      const v = this.vb;
      if (q.x < v.x || q.x > v.x + v.w || q.y < v.y || q.y > v.y + v.h) {
        v.x = q.x - v.w / 2;
        v.y = q.y - v.h / 2;
        this.applyViewBox();
      }
    }
  }

  fit() {
    if (!this.full) return;
    this.vb = { ...this.full };
    this.applyViewBox();
  }

  applyViewBox() {
    if (!this.svg) return;
    const v = this.vb;
    this.svg.setAttribute("viewBox", `${v.x} ${v.y} ${v.w} ${v.h}`);
    this.ovRect.setAttribute("x", v.x);
    this.ovRect.setAttribute("y", v.y);
    this.ovRect.setAttribute("width", v.w);
    this.ovRect.setAttribute("height", v.h);
  }

  // installPanZoom: drag to pan, wheel to zoom around the pointer.
  installPanZoom() {
    let start = null;
    this.view.addEventListener("mousedown", (e) => {
      if (!this.svg) return;
      start = { x: e.clientX, y: e.clientY, vb: { ...this.vb } };
      this.dragged = false;
    });
    window.addEventListener("mousemove", (e) => {
      if (!start) return;
      const dx = e.clientX - start.x, dy = e.clientY - start.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) {
        this.dragged = true;
        this.view.classList.add("dragging");
      }
      const s = this.scale();
      this.vb.x = start.vb.x - dx * s;
      this.vb.y = start.vb.y - dy * s;
      this.applyViewBox();
    });
    window.addEventListener("mouseup", () => {
      start = null;
      this.view.classList.remove("dragging");
      setTimeout(() => { this.dragged = false; }, 0);
    });
    this.view.addEventListener("wheel", (e) => {
      if (!this.svg) return;
      e.preventDefault();
      const k = Math.exp(e.deltaY * 0.0015);
      const r = this.view.getBoundingClientRect(), s = this.scale(), v = this.vb;
      // Keep the point under the pointer fixed.
      const ox = (v.w - r.width * s) / 2, oy = (v.h - r.height * s) / 2;
      const px = v.x + ox + (e.clientX - r.left) * s, py = v.y + oy + (e.clientY - r.top) * s;
      v.w *= k;
      v.h *= k;
      v.x = px - (px - v.x) * k;
      v.y = py - (py - v.y) * k;
      this.applyViewBox();
    }, { passive: false });
  }

  // scale is viewBox units per screen pixel (the svg keeps its aspect).
  scale() {
    const r = this.view.getBoundingClientRect();
    return Math.max(this.vb.w / (r.width || 1), this.vb.h / (r.height || 1));
  }

  overviewClick(e) {
    if (!this.full) return;
    const r = this.overview.getBoundingClientRect(), f = this.full;
    const s = Math.max(f.w / r.width, f.h / r.height);
    const ox = (f.w - r.width * s) / 2, oy = (f.h - r.height * s) / 2;
    this.vb.x = f.x + ox + (e.clientX - r.left) * s - this.vb.w / 2;
    this.vb.y = f.y + oy + (e.clientY - r.top) * s - this.vb.h / 2;
    this.applyViewBox();
  }
};

// q quotes a string for DOT.
function q(s) {
  return '"' + String(s).replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n") + '"';
}

// TP.viz loads the Graphviz instance once.
let vizPromise = null;
TP.viz = function viz() {
  if (!vizPromise) vizPromise = window.Viz.instance();
  return vizPromise;
};
})();

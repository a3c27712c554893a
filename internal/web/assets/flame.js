// flame.js: flame graph (root at the bottom) and icicle (root at the
// top) of the call-stack trees of the selected threads, by any metric.
// A frame's width is its cum; clicking one zooms into it and selects its
// function everywhere. Frames narrower than a pixel are not drawn.
(function () {
"use strict";
const TP = window.TP;
const H = 18; // px per level
const MAX_FRAMES = 6000;

TP.Flame = class Flame {
  constructor(app) {
    this.app = app;
    this.el = document.getElementById("flame");
    this.info = document.getElementById("flame-info");
    this.zoom = null; // node index zoomed into, null: everything
    this.dir = "flame";
    this.dirty = true;
    for (const r of document.querySelectorAll('input[name="flame-dir"]')) {
      r.addEventListener("change", () => { this.dir = r.value; this.invalidate(); });
    }
    document.getElementById("flame-reset").addEventListener("click", () => { this.zoom = null; this.invalidate(); });
    this.el.addEventListener("click", (e) => {
      const d = e.target.closest(".fl");
      if (!d) return;
      const i = +d.dataset.node;
      this.zoom = i < 0 ? null : i;
      if (+d.dataset.f >= 0) this.app.select(+d.dataset.f, "flame");
      this.invalidate();
    });
    // Only a new width changes the frames: showing the tab also reports a
    // resize, and redrawing then would replace frames under the pointer.
    new ResizeObserver(() => { if (this.el.clientWidth !== this.width) this.invalidate(); }).observe(this.el);
    app.bus.on("filter", (re) => { this.regex = re; this.invalidate(); });
  }

  invalidate() {
    this.dirty = true;
    if (this.app.activeTab === "flame") this.render();
  }

  // frames lists what to draw: {node, depth, x, w} with x and w as
  // fractions of the width; node -1 is the selection's root.
  frames() {
    const m = this.app.model, met = this.app.state.metric, mask = this.app.agg().mask;
    const cum = m.cum[met];
    const width = this.el.clientWidth || 800;
    // The root frame (all selected threads) is always drawn; when zoomed,
    // so are the zoomed frame's ancestors, full width, for context.
    const out = [{ node: -1, depth: 0, x: 0, w: 1 }];
    let starts, total;
    if (this.zoom !== null && mask[m.thread[this.zoom]]) {
      starts = [this.zoom];
      total = cum[this.zoom];
      const chain = [];
      for (let p = m.parent[this.zoom]; p >= 0; p = m.parent[p]) chain.unshift(p);
      chain.forEach((p, k) => out.push({ node: p, depth: k + 1, x: 0, w: 1 }));
    } else {
      this.zoom = null;
      starts = m.data.threads.map((t, i) => (mask[i] ? t.root : -1)).filter((r) => r >= 0);
      total = starts.reduce((s, r) => s + cum[r], 0);
    }
    if (total <= 0) return { out, total };
    const base = out.length;
    const minFrac = 1 / width;
    const stack = [];
    let x = 0;
    for (const r of starts) {
      stack.push([r, base, x]);
      x += cum[r] / total;
    }
    while (stack.length && out.length < MAX_FRAMES) {
      const [i, depth, x0] = stack.pop();
      const w = cum[i] / total;
      if (w < minFrac) continue;
      out.push({ node: i, depth, x: x0, w });
      let cx = x0;
      for (const c of m.children(i)) {
        stack.push([c, depth + 1, cx]);
        cx += cum[c] / total;
      }
    }
    this.truncated = stack.length > 0;
    return { out, total };
  }

  render() {
    if (!this.dirty) return;
    this.dirty = false;
    const m = this.app.model, met = this.app.state.metric, unit = this.app.metricInfo().unit;
    const { out } = this.frames();
    const rootTotal = this.app.agg().rootTotal[met];
    const maxDepth = out.reduce((d, fr) => Math.max(d, fr.depth), 0);
    const width = this.el.clientWidth || 800;
    this.width = this.el.clientWidth;
    const sel = this.app.state.selected, re = this.regex;
    const nodes = out.map((fr) => {
      const f = fr.node < 0 ? -1 : m.func[fr.node];
      let name, cls = "fl";
      if (fr.node < 0) name = "all selected threads";
      else if (f < 0) { name = m.threadName(m.thread[fr.node]); cls += " thread"; }
      else name = m.name(f);
      if (f >= 0 && f === sel) cls += " sel";
      if (f >= 0 && re && re.test(name)) cls += " match";
      const value = fr.node < 0 ? rootTotal : m.cum[met][fr.node];
      const top = this.dir === "flame" ? (maxDepth - fr.depth) * H : fr.depth * H;
      return TP.el("div", {
        class: cls, "data-node": fr.node, "data-f": f, "data-name": name,
        title: `${name}${f >= 0 ? " (" + m.module(f) + ")" : ""}\n${TP.fmtValue(value, unit)} (${TP.fmtPct(value, rootTotal)})`,
        style: `left:${(fr.x * width).toFixed(1)}px;width:${Math.max(1, fr.w * width - 1).toFixed(1)}px;top:${top}px;background:${f >= 0 ? TP.color(name) : "#cfd8e3"}`,
      }, fr.w * width > 30 ? name : "");
    });
    const canvas = TP.el("div", { style: `position:relative;height:${(maxDepth + 1) * H}px` }, ...nodes);
    this.el.replaceChildren(canvas);
    this.el.dataset.frames = out.length;
    this.el.dataset.direction = this.dir;
    this.el.dataset.zoom = this.zoom === null ? "" : this.zoom;
    this.info.textContent = `${out.length} frames, ${this.app.metricInfo().label}` + (this.truncated ? ` (limited to ${MAX_FRAMES})` : "");
    if (this.dir === "flame") this.el.scrollTop = this.el.scrollHeight;
  }

  highlight(f) {
    for (const d of this.el.querySelectorAll(".fl.sel")) d.classList.remove("sel");
    for (const d of this.el.querySelectorAll(`.fl[data-f="${f}"]`)) d.classList.add("sel");
  }
};
})();

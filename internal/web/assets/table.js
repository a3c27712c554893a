// table.js: the functions table (one function accumulator a row). Virtualised: only the
// rows in view exist in the DOM, so 100k functions scroll, sort and
// filter without a pause; filtering is debounced.
(function () {
"use strict";
const TP = window.TP;
const ROW = 22; // px, matches --row in style.css

// Columns: key, title, value(f) for sorting, text(f) for display.
function columns(app) {
  const m = app.model, unit = () => app.metricInfo().unit;
  const agg = () => app.agg();
  const met = () => app.state.metric;
  const inst = m.instrumented;
  return [
    { key: "selfpct", title: "Self %", num: true, value: (f) => agg().self[met()][f], text: (f) => TP.fmtPct(agg().self[met()][f], agg().rootTotal[met()]) },
    { key: "totalpct", title: "Total %", num: true, value: (f) => agg().total[met()][f], text: (f) => TP.fmtPct(agg().total[met()][f], agg().rootTotal[met()]) },
    { key: "self", title: "Self", num: true, value: (f) => agg().self[met()][f], text: (f) => TP.fmtValue(agg().self[met()][f], unit()) },
    { key: "total", title: "Total", num: true, value: (f) => agg().total[met()][f], text: (f) => TP.fmtValue(agg().total[met()][f], unit()) },
    { key: "calls", title: "Calls", num: true, value: (f) => agg().calls[f], text: (f) => (inst ? TP.fmtValue(agg().calls[f], "count") : "–") },
    { key: "min", title: "Min/call", num: true, value: (f) => agg().min[f], text: (f) => (inst ? TP.fmtValue(agg().min[f], "ns") : "–") },
    { key: "max", title: "Max/call", num: true, value: (f) => agg().max[f], text: (f) => (inst ? TP.fmtValue(agg().max[f], "ns") : "–") },
    { key: "name", title: "Function (module)", num: false, value: (f) => m.name(f), text: null },
  ];
}

TP.Table = class Table {
  constructor(app) {
    this.app = app;
    this.cols = columns(app);
    this.sortKey = "selfpct";
    this.asc = false;
    this.regex = null;
    this.rows = new Int32Array(0); // function indices shown, sorted
    this.head = document.getElementById("table-head");
    this.body = document.getElementById("table-body");
    this.spacer = document.getElementById("table-spacer");
    this.rowsEl = document.getElementById("table-rows");
    this.count = document.getElementById("table-count");
    this.filterEl = document.getElementById("filter");
    this.renderHead();
    this.body.addEventListener("scroll", () => this.renderRows());
    this.rowsEl.addEventListener("click", (e) => {
      const r = e.target.closest(".vrow");
      if (r) app.select(+r.dataset.f, "table");
    });
    this.filterEl.addEventListener("input", TP.debounce(() => this.setFilter(this.filterEl.value), 150));
    document.getElementById("table").addEventListener("keydown", (e) => this.key(e));
    new ResizeObserver(() => this.renderRows()).observe(this.body);
  }

  renderHead() {
    this.head.replaceChildren(...this.cols.map((c) => TP.el("div", {
      class: (c.num ? "num " : "") + (c.key === this.sortKey ? "sorted" + (this.asc ? " asc" : "") : ""),
      "data-key": c.key,
      onclick: () => this.sortBy(c.key),
    }, c.title)));
  }

  // sortBy sorts by a column; clicking the sorted column reverses it.
  // Numbers sort largest first, names A to Z.
  sortBy(key) {
    if (key === this.sortKey) this.asc = !this.asc;
    else {
      this.sortKey = key;
      this.asc = key === "name";
    }
    this.renderHead();
    this.refresh();
  }

  setFilter(text) {
    try {
      this.regex = text ? new RegExp(text, "i") : null;
      this.filterEl.classList.remove("bad");
    } catch (err) {
      this.filterEl.classList.add("bad");
      return;
    }
    this.refresh();
    this.app.bus.emit("filter", this.regex);
  }

  // refresh recomputes the row list (scope, filter, sort) and redraws.
  refresh() {
    const t0 = performance.now();
    const agg = this.app.agg(), m = this.app.model;
    let rows = agg.rows;
    if (this.regex) {
      const re = this.regex, out = [];
      for (const f of rows) if (re.test(m.name(f)) || re.test(TP.basename(m.module(f)))) out.push(f);
      rows = Int32Array.from(out);
    } else rows = Int32Array.from(rows);
    const col = this.cols.find((c) => c.key === this.sortKey);
    const dir = this.asc ? 1 : -1;
    if (col.num) {
      // Precompute the keys: a comparator that calls closures per
      // comparison is several times slower on 100k rows.
      const key = new Float64Array(m.nfuncs);
      for (const f of rows) key[f] = col.value(f);
      const tie = this.app.agg().total[this.app.state.metric];
      rows.sort((a, b) => dir * (key[a] - key[b]) || tie[b] - tie[a] || a - b);
    } else {
      const names = m.data.funcs.name;
      rows.sort((a, b) => dir * (names[a] < names[b] ? -1 : names[a] > names[b] ? 1 : 0) || a - b);
    }
    this.rows = rows;
    this.spacer.style.height = rows.length * ROW + "px";
    this.count.textContent = `${rows.length.toLocaleString("en-US")} of ${agg.rows.length.toLocaleString("en-US")} functions`;
    this.renderRows(true);
    this.lastRefreshMS = performance.now() - t0;
    document.getElementById("table").dataset.refreshMs = this.lastRefreshMS.toFixed(1);
  }

  // renderRows draws the rows in view (plus a margin).
  renderRows(force) {
    const top = this.body.scrollTop, h = this.body.clientHeight || 400;
    const first = Math.max(0, Math.floor(top / ROW) - 10);
    const last = Math.min(this.rows.length, Math.ceil((top + h) / ROW) + 10);
    if (!force && first === this.first && last === this.last) return;
    this.first = first;
    this.last = last;
    const m = this.app.model, sel = this.app.state.selected;
    const out = [];
    for (let i = first; i < last; i++) {
      const f = this.rows[i];
      const cells = this.cols.map((c) => c.text
        ? TP.el("div", { class: "num" }, c.text(f))
        : TP.el("div", { class: "name", title: m.name(f) + " (" + m.module(f) + ")" }, m.name(f), " ", TP.el("span", { class: "mod" }, "(" + TP.basename(m.module(f)) + ")")));
      out.push(TP.el("div", { class: "vrow" + (f === sel ? " selected" : ""), "data-f": f, "data-name": m.name(f) }, ...cells));
    }
    this.rowsEl.style.transform = `translateY(${first * ROW}px)`;
    this.rowsEl.replaceChildren(...out);
  }

  // reveal scrolls the selected function into view if it is listed.
  reveal(f) {
    const idx = this.rows.indexOf(f);
    if (idx >= 0) {
      const top = idx * ROW, b = this.body;
      if (top < b.scrollTop || top + ROW > b.scrollTop + b.clientHeight) b.scrollTop = top - b.clientHeight / 3;
    }
    this.renderRows(true);
  }

  key(e) {
    if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
    e.preventDefault();
    let idx = this.rows.indexOf(this.app.state.selected);
    idx = Math.max(0, Math.min(this.rows.length - 1, idx + (e.key === "ArrowDown" ? 1 : -1)));
    if (this.rows.length) this.app.select(this.rows[idx], "table");
  }
};
})();

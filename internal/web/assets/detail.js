// detail.js: the function detail (exact arcs): what the
// function cost, who called it and what it called, each with calls and
// the share of this function's total (cum) it is responsible for, from
// the exact per-caller data.
(function () {
"use strict";
const TP = window.TP;

TP.Detail = class Detail {
  constructor(app) {
    this.app = app;
    this.el = document.getElementById("detail");
  }

  render(f) {
    const app = this.app, m = app.model, scope = app.state.scope, met = app.state.metric;
    if (f === null || f === undefined || f < 0) {
      this.el.replaceChildren(TP.el("p", { class: "muted" }, "Select a function."));
      return;
    }
    const agg = app.agg(), unit = app.metricInfo().unit, tot = agg.rootTotal[met];
    const total = agg.total[met][f], self = agg.self[met][f];
    const file = m.file(f);
    const line = m.data.funcs.decl[f] || m.data.funcs.line[f]; // the declaration when DWARF tells
    const facts = [
      ["module", m.module(f)],
      ["source", file ? file + (line ? ":" + line : "") : "unknown (no debug information)"],
      ["calls", m.instrumented ? TP.fmtValue(agg.calls[f], "count") : "not counted (sampling)"],
      ["self", `${TP.fmtValue(self, unit)} (${TP.fmtPct(self, tot)})`],
      ["total", `${TP.fmtValue(total, unit)} (${TP.fmtPct(total, tot)})`],
    ];
    if (m.instrumented) {
      facts.push(["min / max per call", `${TP.fmtValue(agg.min[f], "ns")} / ${TP.fmtValue(agg.max[f], "ns")} (self wall time)`]);
    }
    if (m.recursive[f]) facts.push(["recursive", "yes: it occurs among its own callers"]);
    const dl = TP.el("dl", { class: "facts" });
    for (const [k, v] of facts) dl.append(TP.el("dt", {}, k), TP.el("dd", {}, v));

    const callers = m.callers(f, scope).sort((a, b) => b.cum[met] - a.cum[met] || b.calls - a.calls);
    const callees = m.callees(f, scope).sort((a, b) => b.cum[met] - a.cum[met] || b.calls - a.calls);
    this.el.replaceChildren(
      TP.el("h2", { id: "detail-name", "data-f": f }, m.name(f)),
      dl,
      this.arcTable("Called from", "callers", callers, total, unit, met),
      this.arcTable("Calls", "callees", callees, total, unit, met),
    );
  }

  // arcTable lists arcs with their share of the function's total.
  arcTable(title, id, arcs, total, unit, met) {
    const m = this.app.model;
    const head = TP.el("tr", {}, TP.el("th", {}, title), TP.el("th", { class: "num" }, "Calls"),
      TP.el("th", { class: "num" }, "Cum"), TP.el("th", {}, "Share of this function's total"));
    const rows = arcs.map((a) => {
      const share = total > 0 ? a.cum[met] / total : 0;
      return TP.el("tr", { "data-f": a.func },
        TP.el("td", { class: "fn", onclick: () => a.func !== TP.ROOT && this.app.select(a.func, "detail") },
          a.func === TP.ROOT ? "<thread start>" : m.name(a.func)),
        TP.el("td", { class: "num" }, m.instrumented ? TP.fmtValue(a.calls, "count") : "–"),
        TP.el("td", { class: "num" }, TP.fmtValue(a.cum[met], unit)),
        TP.el("td", { class: "share-cell" }, TP.el("span", { class: "share", style: `width:${Math.round(80 * share)}px` }),
          (100 * share).toFixed(2) + "%"));
    });
    if (!rows.length) rows.push(TP.el("tr", {}, TP.el("td", { colspan: 4, class: "muted" }, "none")));
    return TP.el("table", { id: "detail-" + id }, TP.el("thead", {}, head), TP.el("tbody", {}, ...rows));
  }
};
})();

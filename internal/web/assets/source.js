// source.js: the selected function's source file annotated with
// line-level samples and, for instrumented recordings, each function's
// calls and times at its first line (coverage marks). Marks: "|" a line
// known executed (it has samples in the selected threads, or is in the
// entry basic block of a function they called), "#" a line known not
// executed (a line with code of a probed function they never called);
// no mark where nothing tells, and never on a line without code.
// Without the source file, the function's disassembly is shown instead,
// with samples per instruction.
(function () {
"use strict";
const TP = window.TP;

TP.Source = class Source {
  constructor(app) {
    this.app = app;
    this.el = document.getElementById("source");
    this.cache = new Map(); // url → Promise
    this.shown = null;
    this.dirty = true;
  }

  invalidate() {
    this.dirty = true;
    if (this.app.activeTab === "source") this.render();
  }

  // getSource gets a source file: inlined in the HTML file, else asked
  // from the server (which serves only files the trace names).
  getSource(file) {
    const d = this.app.model.data;
    if (d.sources) return Promise.resolve(d.sources[file] ?? null);
    if (!d.server) return Promise.resolve(null);
    return this.get("source?file=" + encodeURIComponent(file), (r) => r.text());
  }

  getDisasm(f) {
    const d = this.app.model.data;
    if (d.disasm) return Promise.resolve(d.disasm[f] ?? null);
    if (!d.server) return Promise.resolve(null);
    return this.get("disasm?fn=" + f, (r) => r.json());
  }

  get(url, decode) {
    if (!this.cache.has(url)) {
      this.cache.set(url, fetch(url).then((r) => (r.ok ? decode(r) : null)).catch(() => null));
    }
    return this.cache.get(url);
  }

  async render() {
    if (!this.dirty) return;
    this.dirty = false;
    const f = this.app.state.selected;
    if (f === null || f < 0) {
      this.el.replaceChildren(TP.el("p", {}, "Select a function."));
      return;
    }
    const m = this.app.model, file = m.file(f);
    const token = {};
    this.token = token;
    const text = file ? await this.getSource(file) : null;
    if (this.token !== token) return;
    if (text !== null && text !== undefined) {
      this.renderSource(f, file, text);
      return;
    }
    const dis = await this.getDisasm(f);
    if (this.token !== token) return;
    if (dis) this.renderDisasm(f, file, dis);
    else {
      this.el.replaceChildren(TP.el("div", { class: "head", id: "source-missing" },
        `* ${m.name(f)}: ${file ? "source file " + file + " is not available" : "no source file is known"}, and its machine code cannot be read (module ${m.module(f)}).`));
      this.el.dataset.kind = "none";
    }
  }

  // header is the "*" comment lines summarising the function.
  header(f) {
    const app = this.app, m = app.model, agg = app.agg(), met = app.state.metric, unit = app.metricInfo().unit;
    const tot = agg.rootTotal[met];
    const lines = [`* ${m.name(f)} (${m.module(f)})`];
    if (m.instrumented) lines.push(`* called ${TP.fmtValue(agg.calls[f], "count")} times; per call min ${TP.fmtValue(agg.min[f], "ns")}, max ${TP.fmtValue(agg.max[f], "ns")}`);
    lines.push(`* self ${TP.fmtValue(agg.self[met][f], unit)} (${TP.fmtPct(agg.self[met][f], tot)}), total ${TP.fmtValue(agg.total[met][f], unit)} (${TP.fmtPct(agg.total[met][f], tot)})`);
    const callers = m.callers(f, app.state.scope).sort((a, b) => b.calls - a.calls || b.cum[met] - a.cum[met]);
    if (callers.length) {
      lines.push("* called from: " + callers.slice(0, 8).map((a) => m.name(a.func) + (m.instrumented ? ` (${a.calls})` : "")).join(", ") + (callers.length > 8 ? ", …" : ""));
    }
    return TP.el("div", { class: "head" }, lines.join("\n"));
  }

  renderSource(f, file, text) {
    const app = this.app, m = app.model, d = m.data, agg = app.agg(), met = app.state.metric, unit = app.metricInfo().unit;
    const fileIdx = d.files.indexOf(file);
    // Line-level samples of the selected threads.
    const self = new Map(), total = new Map();
    const L = d.lines;
    for (let i = 0; i < L.file.length; i++) {
      if (L.file[i] !== fileIdx || !agg.mask[L.thread[i]]) continue;
      self.set(L.line[i], (self.get(L.line[i]) || 0) + L.self[i]);
      total.set(L.line[i], (total.get(L.line[i]) || 0) + L.total[i]);
    }
    // Functions of this file, by their first line.
    const entries = new Map();
    for (let g = 0; g < m.nfuncs; g++) {
      if (d.funcs.file[g] === fileIdx && d.funcs.line[g] > 0) entries.set(d.funcs.line[g], g);
    }
    const src = text.split("\n");
    const inst = m.instrumented;
    // Coverage: executed wins where functions share a line (inlined code).
    const exec = new Set(), noexec = new Set();
    for (const [ln, t] of total) if (t > 0) exec.add(ln);
    if (inst) {
      for (let g = 0; g < m.nfuncs; g++) {
        if (d.funcs.file[g] !== fileIdx) continue;
        const code = d.code && d.code[g];
        if (agg.calls[g] > 0) {
          if (d.funcs.line[g] > 0) exec.add(d.funcs.line[g]);
          if (code) for (const ln of code.entry) exec.add(ln);
        } else if (d.funcs.probed[g]) {
          if (code) for (const ln of code.lines) noexec.add(ln);
          else if (d.funcs.line[g] > 0) noexec.add(d.funcs.line[g]);
        }
      }
    }
    const head = TP.el("tr", {}, TP.el("th", {}, ""), TP.el("th", { class: "num" }, "self"), TP.el("th", { class: "num" }, "total"),
      inst ? TP.el("th", { class: "num" }, "calls") : null, inst ? TP.el("th", { class: "num" }, "fn " + app.metricInfo().label) : null,
      TP.el("th", {}, "line"), TP.el("th", {}, file));
    const rows = [];
    const focus = d.funcs.decl[f] || d.funcs.line[f];
    let executed = 0, notExecuted = 0;
    for (let i = 0; i < src.length; i++) {
      const ln = i + 1;
      const s = self.get(ln) || 0, t = total.get(ln) || 0;
      const g = entries.get(ln);
      let mark = "", cls = "";
      if (exec.has(ln)) mark = "|";
      else if (noexec.has(ln)) mark = "#";
      if (mark === "|") { cls = "exec"; executed++; }
      if (mark === "#") { cls = "noexec"; notExecuted++; }
      if (s > 0) cls += " hot";
      if (ln === focus) cls += " focus";
      rows.push(TP.el("tr", { class: cls.trim(), "data-line": ln },
        TP.el("td", { class: "m" }, mark),
        TP.el("td", { class: "num s" }, s ? String(s) : ""),
        TP.el("td", { class: "num" }, t ? String(t) : ""),
        inst ? TP.el("td", { class: "num" }, g !== undefined && agg.present[g] ? TP.fmtValue(agg.calls[g], "count") : "") : null,
        inst ? TP.el("td", { class: "num" }, g !== undefined && agg.present[g] ? TP.fmtValue(agg.total[met][g], unit) : "") : null,
        TP.el("td", { class: "n" }, String(ln)),
        TP.el("td", { class: "code" }, src[i])));
    }
    const legend = TP.el("div", { class: "head" }, `* samples are line-level counts of the selected threads (self: the line was executing; total: on the stack). | executed (samples, or the entry block of a called function), # not executed (code of a probed function never called); ${executed} lines marked executed, ${notExecuted} not executed.`);
    this.el.replaceChildren(this.header(f), legend, TP.el("table", { id: "source-table" }, TP.el("thead", {}, head), TP.el("tbody", {}, ...rows)));
    this.el.dataset.kind = "source";
    this.el.dataset.file = file;
    const row = this.el.querySelector(`tr[data-line="${focus}"]`);
    if (row) row.scrollIntoView({ block: "center" });
  }

  renderDisasm(f, file, dis) {
    const rows = dis.insns.map((ins) => TP.el("tr", { class: ins.samples ? "exec hot" : "" },
      TP.el("td", { class: "m" }, ins.samples ? "|" : ""),
      TP.el("td", { class: "num s" }, ins.samples ? String(ins.samples) : ""),
      TP.el("td", { class: "n" }, ins.addr.toString(16)),
      TP.el("td", { class: "code" }, ins.text)));
    const why = file ? `source file ${file} is not available` : "no source file is known";
    this.el.replaceChildren(this.header(f),
      TP.el("div", { class: "head" }, `* ${why}: disassembly of ${dis.symbol} in ${dis.module}; samples whose leaf was at each instruction (whole trace)`),
      TP.el("table", { id: "disasm-table" }, TP.el("tbody", {}, ...rows)));
    this.el.dataset.kind = "disasm";
  }
};
})();

// model.js: the profile as the page navigates it. The server (or the
// HTML file) sends each thread incarnation's call-stack tree in
// pre-order, columnar, and, per thread selection ("all", "p:PID",
// "t:INDEX", "sel"), the engine's functions table with callers and
// callees (internal/web FuncTable, from calltree.FunctionsOf): the numbers
// the reports print, computed once in Go. This file aggregates nothing
// over tree nodes; it keeps only what navigation needs:
//   - the trees' children lists and each node's thread, to walk and zoom
//     the flame graph, and each node's cum (its base plus its children's,
//     one pass at load), the flame graph's widths: sending cum instead
//     would double the node columns of the file;
//   - per selection, its table scattered by function index (rows, and
//     where a function's row is), for the table, the detail and search;
//   - the call graph's arcs out of a function: the callee's caller arcs
//     read the other way (a caller arc's cum is the callee's time in
//     calls from that caller, as the graph counts it), indexed per table.
(function () {
"use strict";
const TP = window.TP || (window.TP = {});

TP.ROOT = -1; // the pseudo function calling each thread's outermost functions

TP.Model = class Model {
  constructor(data) {
    this.data = data;
    const nd = data.nodes;
    const n = nd.parent.length;
    this.n = n;
    this.nfuncs = data.funcs.name.length;
    this.parent = Int32Array.from(nd.parent);
    this.func = Int32Array.from(nd.func);
    this.base = nd.base.map((c) => Float64Array.from(c));
    this.cum = this.base.map((b) => {
      const c = Float64Array.from(b);
      for (let i = n - 1; i > 0; i--) {
        const p = this.parent[i];
        if (p >= 0) c[p] += c[i];
      }
      return c;
    });
    this.instrumented = data.kind === "instrumented";
    this.recursive = Uint8Array.from(data.funcs.recursive || [], (r) => (r ? 1 : 0));
    this.buildIndexes();
    this.cache = new Map();
  }

  // buildIndexes computes each node's thread and the children lists (CSR
  // arrays), in one pass over the pre-order nodes.
  buildIndexes() {
    const n = this.n;
    const thread = new Int32Array(n);
    const rootOf = new Int32Array(n).fill(-1);
    this.data.threads.forEach((t, i) => { rootOf[t.root] = i; });
    const childCount = new Int32Array(n);
    let t = -1;
    for (let i = 0; i < n; i++) {
      if (rootOf[i] >= 0) t = rootOf[i];
      thread[i] = t;
      const p = this.parent[i];
      if (p >= 0) childCount[p]++;
    }
    this.thread = thread;
    this.childStart = prefix(childCount);
    this.childList = new Int32Array(n);
    const fill = Int32Array.from(this.childStart.subarray(0, n));
    for (let i = 0; i < n; i++) {
      const p = this.parent[i];
      if (p >= 0) this.childList[fill[p]++] = i;
    }
  }

  children(i) { return this.childList.subarray(this.childStart[i], this.childStart[i + 1]); }

  // threadMask returns which threads a scope ("all", "p:PID", "t:INDEX",
  // or "sel": the command line's selection) selects.
  threadMask(scope) {
    const ts = this.data.threads, m = new Uint8Array(ts.length);
    ts.forEach((t, i) => {
      m[i] = scope === "all" || scope === "p:" + t.pid || scope === "t:" + i ? 1 : 0;
    });
    if (scope === "sel" && this.data.selection) for (const i of this.data.selection.threads) m[i] = 1;
    return m;
  }

  // aggregate returns the functions table of a scope, as the engine
  // computed it, by function index: per metric self and total, calls,
  // per-call min/max, whether the function occurs, and the table's rows.
  aggregate(scope) {
    if (this.cache.has(scope)) return this.cache.get(scope);
    const nf = this.nfuncs, nm = this.base.length;
    const k = this.data.scopes ? this.data.scopes[scope] : undefined;
    const tab = k === undefined ? null : this.data.tables[k];
    const self = this.base.map(() => new Float64Array(nf));
    const total = this.base.map(() => new Float64Array(nf));
    const calls = new Float64Array(nf), min = new Float64Array(nf), max = new Float64Array(nf);
    const present = new Uint8Array(nf), row = new Int32Array(nf).fill(-1);
    const rows = tab ? Int32Array.from(tab.func) : new Int32Array(0);
    rows.forEach((f, r) => {
      row[f] = r;
      present[f] = 1;
      for (let m = 0; m < nm; m++) {
        self[m][f] = tab.self[m][r];
        total[m][f] = tab.total[m][r];
      }
      if (tab.calls) {
        calls[f] = tab.calls[r];
        min[f] = tab.min[r];
        max[f] = tab.max[r];
      }
    });
    const rootTotal = tab ? Float64Array.from(tab.root_total) : new Float64Array(nm);
    const agg = { scope, mask: this.threadMask(scope), self, total, calls, min, max, present, rows, rootTotal, tab, row, out: null };
    this.cache.set(scope, agg);
    return agg;
  }

  // callers returns the arcs into f within a scope, each with calls and
  // the part of f's self (base) and total (cum) measured in its calls.
  callers(f, scope) {
    const agg = this.aggregate(scope);
    return agg.row[f] < 0 ? [] : arcsOf(agg.tab.callers, agg.row[f]).filter(nonZero);
  }

  // callees returns the arcs out of f within a scope: calls from every
  // activation, times from the outermost ones (for sampling profiles as
  // report's arcflow counts them).
  callees(f, scope) {
    const agg = this.aggregate(scope);
    return agg.row[f] < 0 ? [] : arcsOf(agg.tab.callees, agg.row[f]).filter(nonZero);
  }

  // graphArcs returns the call graph's arcs out of f (TP.ROOT: the
  // threads' outermost calls) within a scope: one per function f called,
  // with its calls and the callee's time in calls from f, as "Called
  // from" counts it: the cum of the callee's outermost activations
  // (recursion 0) under f. So an activation of f inside a recursion still
  // has arcs with time (eval;apply;eval;apply;leaf: apply → leaf carries
  // leaf's time), and an arc back into a recursion carries none (apply →
  // eval): that time is counted where the recursion was entered.
  graphArcs(f, scope) {
    const agg = this.aggregate(scope);
    if (!agg.tab) return [];
    if (!agg.out) agg.out = outArcs(agg.tab);
    return (agg.out.get(f < 0 ? TP.ROOT : f) || []).map((a) => ({ ...a }));
  }

  // total returns f's total in metric m (TP.ROOT: the scope's total).
  total(f, scope, m) {
    const agg = this.aggregate(scope);
    return f === TP.ROOT ? agg.rootTotal[m] : agg.total[m][f];
  }

  name(f) { return f === TP.ROOT ? "<root>" : this.data.funcs.name[f]; }
  module(f) { return f === TP.ROOT ? "" : this.data.modules[this.data.funcs.module[f]]; }
  file(f) {
    const i = f >= 0 ? this.data.funcs.file[f] : -1;
    return i >= 0 ? this.data.files[i] : "";
  }
  threadName(i) {
    const t = this.data.threads[i];
    return t.name + "_" + t.tid;
  }
};

// arcsOf lists row r's arcs of a table's columnar Arcs.
function arcsOf(arcs, r) {
  const out = [];
  for (let k = arcs.start[r]; k < arcs.start[r + 1]; k++) out.push(arcAt(arcs, k, arcs.func[k]));
  return out;
}

// nonZero tells an arc with calls or any measured value, which the
// detail lists (a sampled call back into a recursion has neither).
function nonZero(a) {
  return a.calls > 0 || a.base.some((v) => v !== 0) || a.cum.some((v) => v !== 0);
}

function arcAt(arcs, k, g) {
  return {
    func: g < 0 ? TP.ROOT : g,
    calls: arcs.calls ? arcs.calls[k] : 0,
    base: Float64Array.from(arcs.base, (c) => c[k]),
    cum: Float64Array.from(arcs.cum, (c) => c[k]),
  };
}

// outArcs indexes a table's caller arcs by caller: the arcs out of each
// function, each naming its callee.
function outArcs(tab) {
  const out = new Map(), a = tab.callers;
  tab.func.forEach((g, r) => {
    for (let k = a.start[r]; k < a.start[r + 1]; k++) {
      const from = a.func[k] < 0 ? TP.ROOT : a.func[k];
      if (!out.has(from)) out.set(from, []);
      out.get(from).push(arcAt(a, k, g));
    }
  });
  return out;
}

function prefix(counts) {
  const s = new Int32Array(counts.length + 1);
  for (let i = 0; i < counts.length; i++) s[i + 1] = s[i] + counts[i];
  return s;
}

})();

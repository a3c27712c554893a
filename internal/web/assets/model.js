// model.js: the profile's call-stack trees and the aggregations every
// view shares. The server (or the HTML file) sends each thread
// incarnation's tree in pre-order, columnar; everything else (functions,
// callers and callees, arcs) is derived here for the selected threads,
// with the same rules as internal/instr's Functions:
//   self  = sum of the function's nodes' base;
//   total = sum of the cum of its outermost nodes (recursion 0);
//   a caller's cum = cum of the function's outermost nodes under it
//   (exact per-caller data, not an average share: exact arcs);
//   a callee's cum = cum of the callee's nodes under outermost nodes;
//   for sampling profiles, as report's arcflow, minus the samples whose
//   leaf is the function itself (deeper in a recursion): those are its
//   own, so its callees' cum and its self add up to its total.
// Arcs without calls or any measured value are left out.
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
    this.calls = nd.calls ? Float64Array.from(nd.calls) : null;
    this.minSelf = nd.min ? Float64Array.from(nd.min) : null;
    this.maxSelf = nd.max ? Float64Array.from(nd.max) : null;
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
    this.buildIndexes();
    this.cache = new Map();
  }

  // buildIndexes computes, in one pass over the pre-order nodes, each
  // node's thread and recursion level, the children lists and the nodes
  // of each function (CSR arrays).
  buildIndexes() {
    const n = this.n, nf = this.nfuncs;
    const thread = new Int32Array(n), rec = new Int32Array(n);
    const rootOf = new Int32Array(n).fill(-1);
    this.data.threads.forEach((t, i) => { rootOf[t.root] = i; });
    const depth = new Int32Array(nf); // occurrences on the current path
    const path = [];
    let t = -1;
    const childCount = new Int32Array(n), funcCount = new Int32Array(nf);
    const end = new Int32Array(n); // a node's subtree is [i, end[i])
    for (let i = 0; i < n; i++) {
      if (rootOf[i] >= 0) t = rootOf[i];
      thread[i] = t;
      const p = this.parent[i];
      while (path.length && path[path.length - 1] !== p) {
        const q = path.pop();
        end[q] = i;
        const f = this.func[q];
        if (f >= 0) depth[f]--;
      }
      const f = this.func[i];
      if (f >= 0) {
        rec[i] = depth[f];
        depth[f]++;
        funcCount[f]++;
      }
      path.push(i);
      if (p >= 0) childCount[p]++;
    }
    for (const q of path) end[q] = n;
    this.thread = thread;
    this.rec = rec;
    this.end = end;
    this.childStart = prefix(childCount);
    this.childList = new Int32Array(n);
    const fill = Int32Array.from(this.childStart.subarray(0, n));
    for (let i = 0; i < n; i++) {
      const p = this.parent[i];
      if (p >= 0) this.childList[fill[p]++] = i;
    }
    this.funcStart = prefix(funcCount);
    this.funcList = new Int32Array(this.funcStart[nf]);
    const ff = Int32Array.from(this.funcStart.subarray(0, nf));
    for (let i = 0; i < n; i++) {
      const f = this.func[i];
      if (f >= 0) this.funcList[ff[f]++] = i;
    }
    // A function is recursive when one of its nodes has an ancestor of
    // the same function.
    this.recursive = new Uint8Array(nf);
    for (let i = 0; i < n; i++) if (rec[i] > 0) this.recursive[this.func[i]] = 1;
  }

  children(i) { return this.childList.subarray(this.childStart[i], this.childStart[i + 1]); }
  nodesOf(f) { return this.funcList.subarray(this.funcStart[f], this.funcStart[f + 1]); }

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

  // aggregate computes the functions table of a scope: per metric self
  // and total, calls, per-call min/max, and whether the function occurs.
  aggregate(scope) {
    if (this.cache.has(scope)) return this.cache.get(scope);
    const nf = this.nfuncs, nm = this.base.length, mask = this.threadMask(scope);
    const self = this.base.map(() => new Float64Array(nf));
    const total = this.base.map(() => new Float64Array(nf));
    const calls = new Float64Array(nf);
    const min = new Float64Array(nf).fill(Infinity), max = new Float64Array(nf);
    const present = new Uint8Array(nf);
    const rootTotal = new Float64Array(nm);
    for (let i = 0; i < this.n; i++) {
      if (!mask[this.thread[i]]) continue;
      const f = this.func[i];
      if (f < 0) {
        for (let m = 0; m < nm; m++) rootTotal[m] += this.cum[m][i];
        continue;
      }
      present[f] = 1;
      for (let m = 0; m < nm; m++) {
        self[m][f] += this.base[m][i];
        if (this.rec[i] === 0) total[m][f] += this.cum[m][i];
      }
      if (this.calls) {
        const c = this.calls[i];
        calls[f] += c;
        if (c > 0) {
          if (this.minSelf[i] < min[f]) min[f] = this.minSelf[i];
          if (this.maxSelf[i] > max[f]) max[f] = this.maxSelf[i];
        }
      }
    }
    const rows = [];
    for (let f = 0; f < nf; f++) {
      if (present[f]) rows.push(f);
      if (min[f] === Infinity) min[f] = 0;
    }
    const agg = { scope, mask, self, total, calls, min, max, present, rows: Int32Array.from(rows), rootTotal };
    this.cache.set(scope, agg);
    return agg;
  }

  // callers returns the arcs into f within a scope, each with calls and
  // the part of f's self (base) and total (cum) measured in its calls.
  callers(f, scope) {
    const agg = this.aggregate(scope), arcs = new Map(), nm = this.base.length;
    for (const i of this.nodesOf(f)) {
      if (!agg.mask[this.thread[i]]) continue;
      const p = this.parent[i];
      const g = this.func[p];
      const a = arc(arcs, g, nm);
      if (this.calls) a.calls += this.calls[i];
      for (let m = 0; m < nm; m++) {
        a.base[m] += this.base[m][i];
        if (this.rec[i] === 0) a.cum[m] += this.cum[m][i];
      }
    }
    return nonZero(arcs);
  }

  // callees returns the arcs out of f (TP.ROOT: the threads' outermost
  // calls) within a scope: calls from every activation, times from the
  // outermost ones, so the callees' cum add up to at most f's total.
  callees(f, scope) {
    const agg = this.aggregate(scope), arcs = new Map(), nm = this.base.length;
    const nodes = f === TP.ROOT ? this.data.threads.map((t) => t.root) : this.nodesOf(f);
    const ownLeaves = !this.instrumented && f !== TP.ROOT;
    for (const i of nodes) {
      if (!agg.mask[this.thread[i]]) continue;
      const outer = f === TP.ROOT || this.rec[i] === 0;
      for (const c of this.children(i)) {
        const a = arc(arcs, this.func[c], nm);
        if (this.calls) a.calls += this.calls[c];
        if (!outer) continue;
        for (let m = 0; m < nm; m++) {
          if (!ownLeaves || this.func[c] !== f) a.base[m] += this.base[m][c];
          a.cum[m] += this.cum[m][c] - (ownLeaves ? this.baseWithin(f, c, m) : 0);
        }
      }
    }
    return nonZero(arcs);
  }

  // graphArcs returns the call graph's arcs out of f (TP.ROOT: the
  // threads' outermost calls) within a scope: one per function called
  // from any activation of f, with its calls and the callee's time in
  // calls from f, as "Called from" counts it: the cum of the callee's
  // outermost activations (recursion 0) under f. Unlike callees, an
  // activation of f inside a recursion still has arcs with time
  // (eval;apply;eval;apply;leaf: apply → leaf carries leaf's time), and an
  // arc back into a recursion carries none (apply → eval, parse → parse):
  // that time is counted where the recursion was entered.
  graphArcs(f, scope) {
    const agg = this.aggregate(scope), arcs = new Map(), nm = this.base.length;
    const nodes = f === TP.ROOT ? this.data.threads.map((t) => t.root) : this.nodesOf(f);
    for (const i of nodes) {
      if (!agg.mask[this.thread[i]]) continue;
      for (const c of this.children(i)) {
        const a = arc(arcs, this.func[c], nm);
        if (this.calls) a.calls += this.calls[c];
        if (this.rec[c] > 0) continue;
        for (let m = 0; m < nm; m++) {
          a.base[m] += this.base[m][c];
          a.cum[m] += this.cum[m][c];
        }
      }
    }
    return [...arcs.values()];
  }

  // baseWithin sums the base of f's nodes in node c's subtree.
  baseWithin(f, c, m) {
    const nodes = this.nodesOf(f); // ascending
    let lo = 0, hi = nodes.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (nodes[mid] < c) lo = mid + 1;
      else hi = mid;
    }
    let sum = 0;
    for (let k = lo; k < nodes.length && nodes[k] < this.end[c]; k++) sum += this.base[m][nodes[k]];
    return sum;
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

function prefix(counts) {
  const s = new Int32Array(counts.length + 1);
  for (let i = 0; i < counts.length; i++) s[i + 1] = s[i] + counts[i];
  return s;
}

// nonZero lists the arcs that have calls or any measured value.
function nonZero(arcs) {
  return [...arcs.values()].filter((a) => a.calls > 0 || a.base.some((v) => v !== 0) || a.cum.some((v) => v !== 0));
}

function arc(arcs, g, nm) {
  let a = arcs.get(g);
  if (!a) {
    a = { func: g < 0 ? TP.ROOT : g, calls: 0, base: new Float64Array(nm), cum: new Float64Array(nm) };
    arcs.set(g, a);
  }
  return a;
}
})();

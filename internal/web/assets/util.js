// util.js: formatting, DOM helpers and the selection bus that links the
// views (selecting a function anywhere selects it everywhere).
(function () {
"use strict";
const TP = window.TP;

// el creates an element: el("td", {class: "num"}, "12", child...).
TP.el = function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
};

// fmtValue prints a metric value: times with a unit and four
// significant digits, as the text reports do; counts as integers.
TP.fmtValue = function fmtValue(v, unit) {
  if (unit !== "ns") return Math.round(v).toLocaleString("en-US");
  if (v === 0) return "0";
  const a = Math.abs(v);
  const [d, u] = a >= 1e9 ? [1e9, "s"] : a >= 1e6 ? [1e6, "ms"] : a >= 1e3 ? [1e3, "µs"] : [1, "ns"];
  return +(v / d).toPrecision(4) + u;
};

TP.fmtPct = function fmtPct(v, total) {
  if (!total) return "0.00%";
  return (100 * v / total).toFixed(2) + "%";
};

// debounce delays fn until calls stop for ms milliseconds.
TP.debounce = function debounce(fn, ms) {
  let t = 0;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
};

// color gives a function a stable warm colour from its name (flame graph).
TP.color = function color(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
  const r = 205 + (Math.abs(h) % 50), g = 80 + (Math.abs(h >> 8) % 130), b = 40 + (Math.abs(h >> 16) % 50);
  return `rgb(${r},${g},${b})`;
};

// heat maps a share 0..1 to a fill colour from pale to hot (graph nodes).
TP.heat = function heat(x) {
  x = Math.max(0, Math.min(1, x));
  const r = 255, g = Math.round(250 - 150 * x), b = Math.round(235 - 200 * x);
  return "#" + [r, g, b].map((c) => c.toString(16).padStart(2, "0")).join("");
};

TP.basename = function basename(p) {
  const i = p.lastIndexOf("/");
  return i >= 0 ? p.slice(i + 1) : p;
};

// Bus carries the page state changes between the views.
TP.Bus = class Bus {
  constructor() { this.handlers = {}; }
  on(ev, fn) { (this.handlers[ev] || (this.handlers[ev] = [])).push(fn); }
  emit(ev, ...args) { for (const fn of this.handlers[ev] || []) fn(...args); }
};
})();

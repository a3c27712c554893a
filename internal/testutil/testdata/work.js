// work.js is the node program of trueprof's tests, one program for all of
// them, with two workloads:
//
//   compute  rounds of sorting, Map counting and string building, which V8
//            compiles with its optimising tiers (the corpus);
//   alloc    allocation: large buffers live outside V8's heap, malloc maps
//            each with mmap and the garbage collector's finalizers unmap
//            it, so every buffer filled faults its pages in anew; small
//            objects keep the JIT and the collector busy too (the loss
//            test).
//
// AMOUNT is a number of rounds (the same work every run) or, with an "s"
// suffix, a number of seconds. testutil.NodeProgram runs it as
//
//	node --perf-basic-prof work.js compute|alloc AMOUNT
//
// so that /tmp/perf-PID.map names the compiled functions.
'use strict';

function sortRound(n) {
  const a = new Array(n);
  for (let i = 0; i < n; i++) a[i] = (i * 2654435761) % 1000003;
  a.sort((x, y) => x - y);
  return a[n >> 1];
}

function countWords(n) {
  const counts = new Map();
  for (let i = 0; i < n; i++) {
    const w = 'w' + ((i * 7919) % 5000);
    counts.set(w, (counts.get(w) || 0) + 1);
  }
  return counts.size;
}

function build(n) {
  const parts = [];
  for (let i = 0; i < n; i++) parts.push(String(i % 97));
  return parts.join(',').length;
}

function computeRound() {
  return sortRound(100000) + countWords(100000) + build(100000);
}

function fill(buf, v) {
  for (let i = 0; i < buf.length; i += 4096) buf[i] = v;
  return buf[buf.length - 1];
}

function objects(n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push({ i, s: 'k' + i, a: [i, i + 1] });
  return out.length;
}

function allocRound() {
  const keep = [];
  let sum = 0;
  for (let j = 0; j < 8; j++) {
    const buf = Buffer.allocUnsafeSlow(1 << 20);
    sum += fill(buf, j);
    keep.push(buf);
  }
  return sum + objects(2000) + keep.length;
}

function usage(why) {
  console.error(`work.js: ${why}\nusage: node work.js compute|alloc ROUNDS|SECONDSs`);
  process.exit(2);
}

const [workload, amount] = process.argv.slice(2);
const round = { compute: computeRound, alloc: allocRound }[workload];
if (!round) usage(`unknown workload ${workload}`);
const m = /^([0-9]+(?:\.[0-9]+)?)(s?)$/.exec(amount || '');
if (!m) usage(amount === undefined ? 'missing amount' : `bad amount ${amount}`);
const rounds = m[2] ? Infinity : Number(m[1]);
const end = m[2] ? Date.now() + Number(m[1]) * 1000 : Infinity;
let sum = 0;
let r = 0;
for (; r < rounds && Date.now() < end; r++) sum += round();
console.log(`rounds ${r} sum ${sum}`);

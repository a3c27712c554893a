// The corpus's node program: ROUNDS (its argument) rounds of sorting, Map counting and
// string building, which V8 compiles with its optimising tiers; run with
// --perf-basic-prof so /tmp/perf-PID.map names the compiled functions.
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

const rounds = Number(process.argv[2] || 20);
let sum = 0;
for (let r = 0; r < rounds; r++) {
  sum += sortRound(100000);
  sum += countWords(100000);
  sum += build(100000);
}
console.log('sum', sum);

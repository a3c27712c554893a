// work.js: a node program that allocates for about two seconds, faulting
// in fresh pages all the while (the loss test records it with
// --perf-basic-prof). Large buffers live outside V8's heap: malloc maps
// each with mmap and the garbage collector's finalizers unmap it, so
// every buffer filled faults its pages in anew. Small objects keep the
// JIT and the collector busy too.
//
//	node --perf-basic-prof work.js [seconds]
'use strict';

const seconds = Number(process.argv[2] || 2);

function fill(buf, v) {
  for (let i = 0; i < buf.length; i += 4096) buf[i] = v;
  return buf[buf.length - 1];
}

function objects(n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push({ i, s: 'k' + i, a: [i, i + 1] });
  return out.length;
}

let sum = 0;
let rounds = 0;
const end = Date.now() + seconds * 1000;
while (Date.now() < end) {
  const keep = [];
  for (let j = 0; j < 8; j++) {
    const buf = Buffer.allocUnsafeSlow(1 << 20);
    sum += fill(buf, j);
    keep.push(buf);
  }
  sum += objects(2000) + keep.length;
  rounds++;
}
console.log(`rounds ${rounds} sum ${sum}`);

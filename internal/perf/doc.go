// Package perf opens Linux perf events for sampling and reads their ring
// buffers. It is the only package of trueprof that makes perf_event_open(2)
// and mmap(2) calls; the ring-buffer arithmetic and the record decoding are
// pure functions over byte slices, tested without a kernel.
//
// Besides sampling events it opens tracepoints (TracepointAttr, with ids
// and field layouts from tracefs: LookupTracepoint), per-thread counters
// (CounterAttr) and uprobes (OpenUprobe).
//
// Typical use:
//
//	ev, _ := perf.ParseEvent("cpu-clock")
//	attr := perf.SamplingAttr(ev, perf.SamplingOptions{Freq: 999, Kernel: true})
//	fd, err := perf.Open(attr, pid, cpu, perf.FlagCloexec)
//	ring, err := perf.MapRing(fd, 64)  // 64 data pages
//	ring.Read(func(rec []byte) { var r perf.Record; perf.Decode(rec, attr.Sample_type, &r) ... })
package perf

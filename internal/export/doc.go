// Package export writes a recorded profile in other tools' formats: the
// gzipped profile.proto of pprof (go tool pprof, Speedscope, Perfetto...)
// and the folded stacks of Brendan Gregg's flamegraph.pl (also read by
// Speedscope and inferno). A sampling recording exports its samples; an
// instrumented one the call paths of calltree's analysis, which the
// reports show, with calls, calibrated wall time and the rest as pprof
// sample types.
//
// Usage:
//
//	err := export.PPROF(f, prof, model.Filter{})
//	err = export.Folded(os.Stdout, prof, model.Filter{PID: 42, HasPID: true, Thread: "worker-*"}, "calls")
//
// docs/reports.md describes how the model maps onto each format.
package export

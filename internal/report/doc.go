// Package report renders the views of a recorded profile: tprof (process
// → thread → module → symbol ticks), flat (self and total per function),
// tree (each thread's call-stack tree), arcflow (caller/callee stanzas),
// callflow (every entry and exit) and threads (each thread's life: time,
// CPU, dispatches, interrupts, counters), as text or JSON.
//
// A sampling recording is shown by tprof, flat, tree and arcflow from its
// samples. An instrumented recording (model.Profile.Events not empty) is
// analysed by package calltree, and flat, tree, arcflow and callflow show its
// exact calls and calibrated times (the log-rt and log-gen reports);
// Options.Raw, Metric, Root and ExcludeInterrupts select how. threads
// shows either kind, from the same analysis, so that its rows add up to
// the trees.
//
// A thread id the kernel reused is another thread (an incarnation) in
// every view. Options.By "goroutine" groups a Go program's records by the
// goroutine they ran, and Filter.Thread selects threads by name.
//
// Every report starts with a header that says what is missing from the
// data (lost records, throttling, truncated call chains, a damaged trace,
// and for instrumented recordings the calibration applied, repairs and
// dropped events) so that no one reads a partial profile as a complete
// one.
//
// Usage:
//
//	err := report.Write(os.Stdout, prof, report.Options{
//		View:   "flat",
//		Format: "text",
//		Filter: model.Filter{PID: 1234, HasPID: true, Thread: "worker-*"},
//		Min:    0.5,   // hide functions below 0.5% self
//		Metric: "cpu", // instrumented recordings: columns of CPU time
//	})
//
// WriteStream gives the same report from a model.Stream, reading the
// records from the file one at a time instead of holding them.
//
// docs/reports.md describes each view's columns and the JSON schema.
package report

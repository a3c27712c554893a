// Package instr analyses recordings: the function entries and exits
// (model.Event) of each thread of an instrumented recording, with its
// context switches, interrupts, the time it lost to the profiler
// (model.Adjust) and any samples taken alongside; and for any recording,
// sampling-only too, each thread's time, dispatches, interrupts and
// samples.
//
// Build replays each thread's events through a shadow stack into a
// call-stack tree (seed 000): per node the exact calls and callees, base
// and cum wall time (raw and calibrated), CPU time, dispatches (voluntary
// and involuntary), interrupts and samples, and the minimum and maximum
// self time of one call. It also aggregates per function (seed 003):
// calls, self, total, callers and callees, each with its exact share of
// the function's time. Callflow lists each thread's events in order with
// the metrics of the interval before each one (seed 004's log-gen).
//
// Seed 000's per-thread metric baselines: every thread incarnation (a
// reused tid is another thread) is measured from its creation, or the
// start of recording, to its exit, or the end of recording. Each event
// reads and resets the deltas pending since the previous one and charges
// them to the call then current; at the end every thread's pending
// deltas are applied (the "non-zero list" sweep), to the calls still
// open, so that a thread's tree adds up to its whole life, even when the
// trace was cut short. A thread without events is measured all the same:
// a tree of its root and samples.
//
// With Options.ByGoroutine, a Go target's goroutines are what gets a tree:
// a thread's records belong to the goroutine it last switched to
// (model.GoID), so that a call that returns on another thread still
// matches; a goroutine's time parked counts as off CPU.
//
// Times are calibrated with the trace header's probe costs: every
// interval between two consecutive events of a thread loses the cost of
// its transition kind (entry→entry, entry→exit, exit→entry, exit→exit),
// never going below zero. docs/calibration.md shows that this is seed 001's
// t_exact = t_rough − t_I − m·t_O, per transition. Options.ExcludeInterrupts
// also removes the interrupts' time (seed 004 §3).
//
// Usage:
//
//	r, err := instr.Build(prof, instr.Options{Root: "handle_request"})
//	if err != nil { ... }
//	for _, pr := range r.Processes {
//		for _, th := range pr.Threads {
//			walk(&th.Root) // th.Root.Children, .Calls, .Base.WallNS, ...
//		}
//	}
//	flows, err := instr.Callflow(prof, instr.Options{Thread: "worker-*"})
//
// Everything in a Result marshals to JSON with the metric keys wall_ns,
// wall_ns_raw, delta_ns, cpu_ns, dispatches, dispatches_voluntary,
// dispatches_involuntary, interrupts, interrupt_ns and samples, and exact
// calls.
package instr

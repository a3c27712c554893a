// Package instr analyses instrumented recordings: the function entries and
// exits (model.Event) of each thread, with its context switches, the time
// it lost to the profiler (model.Adjust) and any samples taken alongside.
//
// Build replays each thread's events through a shadow stack into a
// call-stack tree (seed 000): per node the exact calls and callees, base
// and cum wall time (raw and calibrated), CPU time, dispatches and
// samples, and the minimum and maximum self time of one call. It also
// aggregates per function (seed 003): calls, self, total, callers and
// callees, each with its exact share of the function's time. Callflow
// lists each thread's events in order with the metrics of the interval
// before each one (seed 004's log-gen).
//
// Times are calibrated with the trace header's probe costs: every
// interval between two consecutive events of a thread loses the cost of
// its transition kind (entry→entry, entry→exit, exit→entry, exit→exit),
// never going below zero. docs/calibration.md shows that this is seed 001's
// t_exact = t_rough − t_I − m·t_O, per transition.
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
//	flows, err := instr.Callflow(prof, instr.Options{TID: 42, HasTID: true})
//
// Everything in a Result marshals to JSON with the metric keys wall_ns,
// wall_ns_raw, delta_ns, cpu_ns, dispatches, involuntary and samples, and
// exact calls.
package instr

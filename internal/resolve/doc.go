// Package resolve turns the addresses of a recording into trace records
// while the recording runs: it follows each process's executable mappings
// (Mmap, Fork, Exec, Exit, in the stream's time order), names code through
// the module files (opened once per build id with internal/symbolize),
// the kernel's symbols and the JIT runtimes' perf maps and jitdump files,
// and writes each Location and StackNode to the trace once (interning).
// Samples' stacks are the kernel's frame-pointer chain with its leaf
// repaired, or unwound from the sample's stack copy (internal/unwind).
// JIT code no file names when first seen is renamed when its runtime
// writes the files later (Rename records).
//
// A recorder feeds it so:
//
//	r := resolve.New(w, os.Stderr, resolve.Options{Unwind: true, Mode: unwind.ModeAuto})
//	r.Mmap(pid, resolve.Mapping{Start: start, End: end, PgOff: off, Path: path, Time: t})
//	node, truncated, reason, err := r.Stack(sample) // a StackNode id
//	fn, err := r.FunctionLocation(pid, thisFn, t)   // a hook's function
//	...
//	err = r.Finish() // names late JIT code, says what stayed unnamed
package resolve

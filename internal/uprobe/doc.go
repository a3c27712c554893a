// Package uprobe places entry and exit probes on the functions of an
// unmodified ELF binary, launched or running, and delivers each hit as an
// Event with its CLOCK_MONOTONIC time and thread.
//
// Plan chooses where each function is probed, from its symbols and a
// disassembly of its code:
//
//   - The entry probe goes on an instruction the kernel emulates when one
//     runs exactly once per call near the start: the push %rbp after Go's
//     stack-growth check, or after a C function's endbr64. Emulated hits
//     cost about 0.45 µs here; single-stepped ones (endbr64, mov, ret, a
//     frameless leaf's first instruction) about 13.5 µs. Site.Emulated says
//     which, and SiteCosts measures both on the running machine.
//   - A C, C++ or Rust function whose entry instruction would be
//     single-stepped is probed at its callers (Site.Calls) when every call
//     of it is known: on its call instructions and on the instructions
//     they return to, which the kernel emulates, or for a call its
//     caller's epilogue follows, by its caller's exit. Where a longjmp
//     or an exception could leave it, it is not moved; nor onto an
//     instruction another probe, of its set or of an earlier one
//     (Options.Taken), holds.
//   - C, C++ and Rust functions exit through a uretprobe at the entry,
//     except those a C++ exception can pass through (RET probes, as Go's).
//     A module can host C++ unwinding when it imports or defines a throw,
//     catch, personality or unwinder symbol (__cxa_throw,
//     __cxa_begin_catch, __gxx_personality_v0, _Unwind_RaiseException,
//     _Unwind_Resume, a std::__throw_* helper) or needs libstdc++, libc++
//     or libgcc_s; a static C++ program defines them. In such a module a
//     function keeps its uretprobe only if it branches to nothing but
//     functions of the module that do too, with no indirect branch and
//     code that decodes; in any other module every function does.
//   - Go functions exit through probes on their RET instructions (and
//     tail-call jumps), because a uretprobe rewrites the return address on
//     a stack that the Go runtime may move. Calls left by a panic have no
//     exit event.
//
// Attach places every probe of a set in up to four BPF uprobe_multi
// links (RET probes, uretprobes, call-site exits paired with the next
// call's entry, then entries) whose BPF program writes to
// one ring buffer. The kernel restricts them to one process, all its
// threads included. Exits go on first and come off last (Detach): from
// Set.Live on, every entry written has its exit written while the exit
// probes stay. Per-probe perf events through the uprobe PMU
// (perf.OpenUprobe) do not scale: each needs a descriptor per CPU, and
// closing each waits for an RCU grace period, so detaching 10,000 of them
// takes minutes where one link takes about 0.1 s (bench/uprobes).
//
// A site with Hold set stops the whole process at its entry (SIGSTOP to
// the entering thread, sent by the BPF program) and delivers that entry
// with Event.Held at once, until Set.Release: the caller probes what the
// function calls before it runs, then resumes the process (record's
// --root, JFluid's Scheme B made synchronous).
//
//	sites, err := uprobe.Plan("/usr/bin/prog", []string{"prog:parse*", "ns::Cache::*"})
//	if err != nil {
//		return err
//	}
//	set, err := uprobe.Attach(pid, "/usr/bin/prog", sites)
//	if err != nil {
//		return err
//	}
//	defer set.Close() // removes every probe; the process runs on
//	for running {
//		poll(set.Fds(), 100*time.Millisecond)
//		set.Read(func(e uprobe.Event) {
//			fmt.Println(e.Time, e.TID, e.Entry, sites[e.Site].Function)
//		})
//	}
//	costs, _ := uprobe.SiteCosts()
//	for _, h := range set.Hot(costs, elapsed, 0.05) {
//		log.Println("warning:", h)
//	}
//
// AttachGoroutines follows a Go process's goroutines instead: one link
// on the scheduler (runtime.execute, and runtime.coroswitch_m for
// coroutines) whose BPF program reads the id of the goroutine a thread
// starts running, at the offset symbolize.ReadGoLayout finds, and
// delivers it as a GoSwitch:
//
//	layout, err := symbolize.ReadGoLayout(path)
//	...
//	g, err := uprobe.AttachGoroutines(pid, path, layout, false)
//	...
//	g.Read(func(s uprobe.GoSwitch) { fmt.Println(s.Time, s.TID, s.GoID) })
//
// The package supports x86-64 only.
package uprobe

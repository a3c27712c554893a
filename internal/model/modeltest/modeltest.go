// Package modeltest builds model.Profiles for tests: sampled profiles
// from readable stacks (Add) and instrumented ones from short scripts
// of a thread's timeline (Run). Every test of the analysis, the reports,
// the exports and the web UI builds its profiles here.
//
// A stack is written outermost first, one location per ';'-separated
// element: "main;compute;write@/lib/libc.so.6". Inside an element, '>'
// separates a function from the functions inlined into it, outer first:
// "compute>inl_helper" is one location whose physical function compute
// has inl_helper inlined. "@module" at the end of an element sets the
// location's module (default DefaultModule). The empty stack is a sample
// without a stack.
//
// A script is a thread's timeline, whitespace-separated tokens in time
// order:
//
//	123          the current time becomes 123 (ns, absolute)
//	+main        entry of main at the current time
//	-main        exit of main
//	out          switched out voluntarily (blocked)
//	preempt      switched out involuntarily
//	in           switched back in
//	adj:40       the thread lost 40ns to the profiler, ending now
//	adj:40:3     ... and dropped 3 events
//	s:main;f;g   a sample with a stack as above
//	irq:30       a hardware interrupt handled for 30ns, ending now
//	softirq:30   a softirq, likewise
//	go:17        the thread switches to goroutine 17
//	exit         the thread exits (its incarnation at this time)
//	pf:12 mig:3  the thread's page fault and migration counters
//
// Function names in scripts may carry a module too, "f@/lib/libx.so".
// Each kind of location has its own ids, as in a real trace: the entry
// of a function (a script's +f), an address inside it (a script's
// sample, 8 bytes further) and the locations of Add's stacks. Ids are
// given in order of first use, location id i at offset i*0x10.
//
//	p := modeltest.New().Thread(1, 1, "app").Add(1, 1, "main;f", 3).Profile()
//	q := modeltest.NewHooks().Thread(1, 1, "app").
//		Run(1, 1, "0 +main 10 +f 30 -f 45 -main").Profile()
package modeltest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// DefaultModule is the module of locations that do not name one.
const DefaultModule = "/usr/bin/app"

// Kinds of locations, each its own namespace of elements (see location).
const (
	plainLocation  = ""       // a location of Add's stacks
	entryLocation  = "entry"  // a function's entry, of a script's events
	sampleLocation = "sample" // an address inside a function, of a script's samples
)

// Builder accumulates a profile. The zero Builder is not usable; call New
// or NewHooks.
type Builder struct {
	p     *model.Profile
	locs  map[string]uint32
	nodes map[[2]uint32]uint32
	// time is the time of Add's next sample, less its 1ms step.
	time uint64
	// endAtLast makes the recording end with its last event or exit, as
	// an instrumented recording does; otherwise End keeps its time.
	endAtLast bool
	// exits and counters apply to the incarnation of their time, known
	// once the threads are sorted.
	exits    []exit
	counters []counter
}

// exit is an exit token of a script.
type exit struct {
	time     uint64
	pid, tid uint32
}

// counter is a counter token of a script.
type counter struct {
	time     uint64
	pid, tid uint32
	kind     trace.CounterKind
	value    uint64
}

// startTime is the wall-clock start of every built profile, fixed so that
// reports of it are reproducible.
var startTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// New returns a Builder for a cpu-clock profile sampled every 1ms from
// 1s (trace clock) to 9s.
func New() *Builder {
	b := newBuilder(trace.Header{StartNS: 1_000_000_000, Event: "cpu-clock", Period: 1_000_000})
	b.p.End.Time = 9_000_000_000
	b.time = 1_000_000_000
	return b
}

// NewHooks returns a Builder for a hook recording without calibration,
// with an end record at its last event or exit.
func NewHooks() *Builder {
	b := newBuilder(trace.Header{Event: "dummy", Instrument: "hook"})
	b.endAtLast = true
	return b
}

// newBuilder returns a Builder of a profile with header h completed by
// what every built profile shares.
func newBuilder(h trace.Header) *Builder {
	h.Version, h.Clock, h.StartTime = trace.Version, "CLOCK_MONOTONIC", startTime
	h.Callchain, h.Mode = "fp", "normal"
	return &Builder{
		p: &model.Profile{
			Header:    h,
			Locations: make([]model.Location, 1),
			Stacks:    make([]model.StackNode, 1),
			End:       &model.End{Reason: "exited"},
		},
		locs:  map[string]uint32{},
		nodes: map[[2]uint32]uint32{},
	}
}

// Calibrate sets the header's calibration: the overheads of the
// transitions entry→entry, entry→exit, exit→entry and exit→exit, in ns.
func (b *Builder) Calibrate(ee, ex, xe, xx float64) *Builder {
	b.p.Header.Calibration = &trace.Calibration{
		Mechanism: b.p.Header.Instrument,
		Statistic: "min",
		Overhead:  [trace.Transitions]float64{ee, ex, xe, xx},
		PerCall:   ee + ex + xe + xx,
		Samples:   1000,
	}
	return b
}

// Thread records a thread created at start (0: before recording); a
// thread whose tid is its pid also names the process.
func (b *Builder) Thread(pid, tid uint32, name string) *Builder {
	return b.ThreadAt(pid, tid, name, 0)
}

// ThreadAt is Thread for a thread created at time start: a tid may be
// recorded twice with different starts (a reused thread id).
func (b *Builder) ThreadAt(pid, tid uint32, name string, start uint64) *Builder {
	b.p.Threads = append(b.p.Threads, &model.Thread{PID: pid, TID: tid, Name: name, Names: []string{name}, Start: start})
	if pid == tid && b.p.Process(pid) == nil {
		b.p.Processes = append(b.p.Processes, &model.Process{PID: pid, Name: name})
	}
	return b
}

// Add adds n samples of thread tid of process pid with the given stack,
// 1ms apart after the previous sample Add added.
func (b *Builder) Add(pid, tid uint32, stack string, n int) *Builder {
	return b.add(pid, tid, stack, n, false)
}

// AddTruncated is Add for samples whose call chain was cut short.
func (b *Builder) AddTruncated(pid, tid uint32, stack string, n int) *Builder {
	return b.add(pid, tid, stack, n, true)
}

// add is Add and AddTruncated.
func (b *Builder) add(pid, tid uint32, stack string, n int, truncated bool) *Builder {
	leaf := b.stack(plainLocation, stack)
	for range n {
		b.time += 1_000_000
		b.p.Samples = append(b.p.Samples, model.Sample{
			Time:      b.time,
			PID:       pid,
			TID:       tid,
			Period:    1_000_000,
			Stack:     leaf,
			Truncated: truncated,
		})
		if truncated {
			b.p.Truncated++
		}
	}
	return b
}

// Run appends the records of script (see the package documentation) to
// thread tid of process pid. It panics on a malformed script.
func (b *Builder) Run(pid, tid uint32, script string) *Builder {
	var now uint64
	for _, tok := range strings.Fields(script) {
		switch {
		case tok[0] >= '0' && tok[0] <= '9':
			t, err := strconv.ParseUint(tok, 10, 64)
			if err != nil {
				panic(fmt.Sprintf("modeltest: bad time %q", tok))
			}
			now = t
		case tok[0] == '+' || tok[0] == '-':
			b.p.Events = append(b.p.Events, model.Event{Time: now, PID: pid, TID: tid, Entry: tok[0] == '+', Function: b.Function(tok[1:])})
		case tok == "out" || tok == "preempt" || tok == "in":
			b.p.Switches = append(b.p.Switches, model.Switch{Time: now, PID: pid, TID: tid, Out: tok != "in", Preempt: tok == "preempt"})
		case strings.HasPrefix(tok, "adj:"):
			f := strings.Split(tok[4:], ":")
			d, err := strconv.ParseUint(f[0], 10, 64)
			var dropped uint64
			if err == nil && len(f) > 1 {
				dropped, err = strconv.ParseUint(f[1], 10, 64)
			}
			if err != nil || len(f) > 2 {
				panic(fmt.Sprintf("modeltest: bad adjustment %q", tok))
			}
			b.p.Adjusts = append(b.p.Adjusts, model.Adjust{Time: now, PID: pid, TID: tid, Duration: d, Dropped: dropped})
		case strings.HasPrefix(tok, "s:"):
			b.p.Samples = append(b.p.Samples, model.Sample{Time: now, PID: pid, TID: tid, Period: 1, Stack: b.stack(sampleLocation, tok[2:])})
		case strings.HasPrefix(tok, "irq:") || strings.HasPrefix(tok, "softirq:"):
			kind, arg, _ := strings.Cut(tok, ":")
			q := model.IRQ{Time: now, PID: pid, TID: tid, Soft: kind == "softirq", Vector: 1, Duration: number(tok, arg)}
			if q.Soft {
				q.Vector = 3
			}
			b.p.IRQs = append(b.p.IRQs, q)
		case strings.HasPrefix(tok, "go:"):
			b.p.GoIDs = append(b.p.GoIDs, model.GoID{Time: now, PID: pid, TID: tid, GoID: number(tok, tok[3:])})
		case tok == "exit":
			b.exits = append(b.exits, exit{now, pid, tid})
		case strings.HasPrefix(tok, "pf:"):
			b.counters = append(b.counters, counter{now, pid, tid, trace.CounterPageFaults, number(tok, tok[3:])})
		case strings.HasPrefix(tok, "mig:"):
			b.counters = append(b.counters, counter{now, pid, tid, trace.CounterMigrations, number(tok, tok[4:])})
		default:
			panic(fmt.Sprintf("modeltest: bad token %q", tok))
		}
	}
	return b
}

// number parses the number s of token tok, and panics if it is not one.
func number(tok, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("modeltest: bad token %q", tok))
	}
	return n
}

// Function returns the location id of the entry of function fn
// ("name" or "name@module"), creating it.
func (b *Builder) Function(fn string) uint32 {
	return b.location(entryLocation, fn)
}

// location returns the location of element elem of a stack or script
// (see the package documentation) in the namespace of kind: ids are
// given in order of first use, over all kinds; a sample location lies 8
// bytes after the offset of its id.
func (b *Builder) location(kind, elem string) uint32 {
	if id, ok := b.locs[kind+":"+elem]; ok {
		return id
	}
	funcs, module := elem, DefaultModule
	if i := strings.LastIndex(elem, "@"); i >= 0 {
		funcs, module = elem[:i], elem[i+1:]
	}
	names := strings.Split(funcs, ">")
	id := uint32(len(b.p.Locations))
	l := model.Location{Module: module, Offset: uint64(id) * 0x10}
	if kind == sampleLocation {
		l.Offset += 8
	}
	l.Address = 0x400000 + l.Offset
	for i := len(names) - 1; i >= 0; i-- { // innermost first
		l.Frames = append(l.Frames, model.Frame{Function: names[i], File: "src/" + names[i] + ".c", Line: 10 + i})
	}
	b.p.Locations = append(b.p.Locations, l)
	b.locs[kind+":"+elem] = id
	return id
}

// stack returns the leaf stack node of a sample stack whose locations are
// of kind, creating what is missing; 0 for the empty stack.
func (b *Builder) stack(kind, stack string) uint32 {
	var node uint32
	if stack == "" {
		return 0
	}
	for _, elem := range strings.Split(stack, ";") {
		loc := b.location(kind, elem)
		k := [2]uint32{node, loc}
		id, ok := b.nodes[k]
		if !ok {
			id = uint32(len(b.p.Stacks))
			b.p.Stacks = append(b.p.Stacks, model.StackNode{Parent: node, Location: loc})
			b.nodes[k] = id
		}
		node = id
	}
	return node
}

// Profile returns the profile built so far with its records sorted by
// time (stably: a thread's records at equal times keep their script
// order) and its threads and processes sorted as the model promises. The
// Builder must not be used afterwards.
func (b *Builder) Profile() *model.Profile {
	p := b.p
	slices.SortStableFunc(p.Events, func(x, y model.Event) int { return cmp.Compare(x.Time, y.Time) })
	slices.SortStableFunc(p.Switches, func(x, y model.Switch) int { return cmp.Compare(x.Time, y.Time) })
	slices.SortStableFunc(p.Adjusts, func(x, y model.Adjust) int { return cmp.Compare(x.Time, y.Time) })
	slices.SortStableFunc(p.Samples, func(x, y model.Sample) int { return cmp.Compare(x.Time, y.Time) })
	slices.SortStableFunc(p.IRQs, func(x, y model.IRQ) int { return cmp.Compare(x.Time, y.Time) })
	slices.SortStableFunc(p.GoIDs, func(x, y model.GoID) int { return cmp.Compare(x.Time, y.Time) })
	slices.SortFunc(p.Processes, func(x, y *model.Process) int { return cmp.Compare(x.PID, y.PID) })
	slices.SortStableFunc(p.Threads, func(x, y *model.Thread) int {
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.TID, y.TID), cmp.Compare(x.Start, y.Start))
	})
	for _, e := range b.exits {
		if t := p.ThreadAt(e.pid, e.tid, e.time); t != nil {
			t.End = e.time
		}
	}
	for _, c := range b.counters {
		if t := p.ThreadAt(c.pid, c.tid, c.time); t != nil {
			if t.Counters == nil {
				t.Counters = map[trace.CounterKind]uint64{}
			}
			t.Counters[c.kind] = c.value
		}
	}
	if !b.endAtLast {
		return p
	}
	// The recording ends with its last event or exit (the analysis
	// takes any later record as the end).
	var last uint64
	for _, e := range p.Events {
		last = max(last, e.Time)
	}
	for _, e := range b.exits {
		last = max(last, e.time)
	}
	p.End.Time = last
	return p
}

// RandomHooks builds a hook recording of one to four threads of process 10, each a
// random well-nested timeline of calls among a few functions (recursion,
// direct and indirect, is common) with context switches, profiler
// pauses, interrupts, goroutine switches and samples whose stacks extend
// the traced stack with untraced frames. A thread may be created during
// the recording, exit before its end, and have its tid reused by a second
// incarnation. With calibrate set the header has a calibration whose
// overheads often exceed the intervals, so clamping at zero is exercised.
func RandomHooks(r *rand.Rand, calibrate bool) *model.Profile {
	names := []string{"a", "b", "c", "d", "e@/lib/libx.so"}
	b := NewHooks()
	if calibrate {
		b.Calibrate(float64(r.IntN(30)), float64(r.IntN(30))+0.5, float64(r.IntN(30)), float64(r.IntN(30))+0.25)
	}
	threads := 1 + r.IntN(4)
	for t := range threads {
		tid := uint32(10 + t)
		var start uint64
		if r.IntN(3) == 0 {
			start = 1 + uint64(r.IntN(50)) // created during the recording
		}
		b.ThreadAt(10, tid, fmt.Sprintf("t%d", t), start)
		now := start + uint64(r.IntN(100))
		now = b.randomRun(r, names, tid, now)
		if r.IntN(3) != 0 {
			continue
		}
		// The thread exits; sometimes a new one gets its tid.
		now += uint64(r.IntN(20))
		b.Run(10, tid, fmt.Sprintf("%d exit pf:%d mig:%d", now, r.IntN(9), r.IntN(3)))
		if r.IntN(2) == 0 {
			now += 1 + uint64(r.IntN(20))
			b.ThreadAt(10, tid, fmt.Sprintf("t%d-again", t), now)
			b.randomRun(r, names, tid, now+uint64(r.IntN(10)))
		}
	}
	return b.Profile()
}

// randomRun appends RandomHooks's timeline of thread tid from time now, and
// returns its last time.
func (b *Builder) randomRun(r *rand.Rand, names []string, tid uint32, now uint64) uint64 {
	var sb strings.Builder
	var stack []string
	off := false
	emit := func(tok string) {
		fmt.Fprintf(&sb, "%d %s ", now, tok)
	}
	for range 1 + r.IntN(60) {
		now += uint64(r.IntN(50))
		switch k := r.IntN(23); {
		case k < 8 && len(stack) < 12:
			f := names[r.IntN(len(names))]
			stack = append(stack, f)
			emit("+" + f)
		case k < 14 && len(stack) > 0:
			emit("-" + stack[len(stack)-1])
			stack = stack[:len(stack)-1]
		case k < 16:
			if off {
				emit("in")
			} else if r.IntN(2) == 0 {
				emit("out")
			} else {
				emit("preempt")
			}
			off = !off
		case k < 17:
			emit(fmt.Sprintf("adj:%d:%d", r.IntN(80), r.IntN(2)))
		case k < 19:
			if !off {
				emit(fmt.Sprintf("%s:%d", []string{"irq", "softirq"}[r.IntN(2)], r.IntN(30)))
			}
		case k < 20:
			emit(fmt.Sprintf("go:%d", 1+r.IntN(4)))
		default:
			frames := append([]string{"_start"}, stack...)
			for range r.IntN(3) {
				frames = append(frames, fmt.Sprintf("u%d", r.IntN(3)))
			}
			if last := frames[len(frames)-1]; r.IntN(4) == 0 && !strings.Contains(last, "@") {
				frames[len(frames)-1] += ">inl"
			}
			emit("s:" + strings.Join(frames, ";"))
		}
	}
	for len(stack) > 0 && r.IntN(8) != 0 { // sometimes leave calls open
		now += uint64(r.IntN(50))
		emit("-" + stack[len(stack)-1])
		stack = stack[:len(stack)-1]
	}
	if off {
		now += uint64(r.IntN(50))
		emit("in")
	}
	b.Run(10, tid, sb.String())
	return now
}

// Fixture returns the profile the golden files are made of: two processes,
// three threads, inlining (also at the leaf), direct and indirect
// recursion, the same function names in two modules, kernel frames,
// samples without a stack, truncated samples, lost records and
// throttling.
func Fixture() *model.Profile {
	b := New().
		Thread(100, 100, "app").
		Thread(100, 101, "worker").
		Thread(200, 200, "db")
	b.Add(100, 100, "main;compute>inl_helper", 30).
		Add(100, 100, "main;compute", 10).
		Add(100, 100, "main;compute;write@/lib/libc.so.6;sys_write@[kernel.kallsyms]", 8).
		Add(100, 100, "main;parse;parse;parse", 6).
		Add(100, 100, "main;parse;eval;parse", 3).
		Add(100, 101, "start_thread@/lib/libc.so.6;worker_loop;compute>inl_helper", 12).
		Add(100, 101, "start_thread@/lib/libc.so.6;worker_loop;hash@/lib/libcrypto.so.3", 5).
		Add(100, 101, "", 2).
		Add(200, 200, "main@/usr/bin/db;query@/usr/bin/db;hash@/usr/bin/db", 15).
		Add(200, 200, "main@/usr/bin/db;query@/usr/bin/db;sort@/usr/bin/db;sort>cmp@/usr/bin/db", 7).
		AddTruncated(200, 200, "scan@/usr/bin/db;memcpy@/lib/libc.so.6", 4)
	p := b.Profile()
	p.Lost = model.LostCounts{Kernel: 3, Unparsed: 1}
	p.Throttled = 2
	return p
}

// RandomSamples builds a sampled profile from a few functions in two modules so
// that recursion (direct, indirect, through inlined frames) is common.
// It also has several threads, samples without a stack and truncated
// samples.
func RandomSamples(r *rand.Rand) *model.Profile {
	names := []string{"a", "b", "c", "d", "e"}
	modules := []string{"", "@/lib/libx.so"}
	b := New()
	threads := 1 + r.IntN(4)
	for t := range threads {
		b.Thread(10, uint32(10+t), fmt.Sprintf("t%d", t))
	}
	for range 1 + r.IntN(30) {
		tid := uint32(10 + r.IntN(threads))
		if r.IntN(10) == 0 {
			b.Add(10, tid, "", 1+r.IntN(3))
			continue
		}
		var elems []string
		for range 1 + r.IntN(7) {
			// A location: a physical function with up to two inlined ones.
			var inl []string
			for range 1 + r.IntN(3) {
				inl = append(inl, names[r.IntN(len(names))])
			}
			elems = append(elems, strings.Join(inl, ">")+modules[r.IntN(len(modules))])
		}
		stack := strings.Join(elems, ";")
		if r.IntN(8) == 0 {
			b.AddTruncated(10, tid, stack, 1+r.IntN(5))
		} else {
			b.Add(10, tid, stack, 1+r.IntN(5))
		}
	}
	return b.Profile()
}

// InstrFixture returns the instrumented recording the golden files of
// the instrumented views are made of (hook probes, calibrated, with
// context switches, interrupts, per-thread counters and samples
// alongside), recorded from 1000µs to 2805µs. Process app (pid 1) has
// thread app (tid 1), whose main recurses through parse, then calls
// compute, which blocks for 200µs and calls write in libc and helper,
// whose exit is missing (a repair); an interrupt lands in helper, a
// softirq in main; a last exit of main matches no call (another repair);
// a sample under helper adds the untraced memcpy. Its thread worker (tid
// 2) calls compute twice, once losing 20µs to the profiler, then hash in
// libcrypto, and exits; a new thread gets tid 2, is renamed io and calls
// read until it exits. Process db (pid 3) has one thread with direct
// recursion in another module.
func InstrFixture() *model.Profile {
	b := NewHooks().Calibrate(300, 250, 400, 100).
		Thread(1, 1, "app").
		Thread(1, 2, "worker").
		ThreadAt(1, 2, "worker", 1_400_000).
		Thread(3, 3, "db")
	// Times are in µs.
	b.Run(1, 1, micro(`1000 +main 1010 +parse 1020 +parse 1030 +parse 1045 -parse 1060 -parse 1070 -parse
		1080 +compute 1100 out 1300 in 1400 +write@/lib/libc.so.6 1500 -write@/lib/libc.so.6
		1510 +helper 1515 s:_start;main;compute;helper;memcpy@/lib/libc.so.6 1530 irq:4000 1600 -compute
		1700 preempt 1750 in 2000 softirq:12000 2800 -main 2805 -main pf:120 mig:2`))
	b.Run(1, 2, micro(`1005 +worker_loop 1020 +compute 1050 -compute 1060 +compute 1100 adj:20000 1120 -compute
		1130 +hash@/lib/libcrypto.so.3 1150 s:start_thread;worker_loop;hash@/lib/libcrypto.so.3
		1200 -hash@/lib/libcrypto.so.3 1250 -worker_loop 1260 pf:30 mig:0 exit`))
	b.Run(1, 2, micro(`1410 +read@/lib/libc.so.6 1420 out 1480 in 1490 -read@/lib/libc.so.6 1500 exit`))
	b.Run(3, 3, micro(`1100 +query@/usr/bin/db 1150 +sort@/usr/bin/db 1160 +sort@/usr/bin/db 1170 -sort@/usr/bin/db
		1180 -sort@/usr/bin/db 1300 -query@/usr/bin/db`))
	p := b.Profile()
	p.Header.Event, p.Header.Freq = "cpu-clock", 999
	p.Header.StartNS = 1_000_000
	for i := range p.Samples {
		p.Samples[i].Period = 1_001_001 // 1s / 999 Hz
	}
	io := p.ThreadAt(1, 2, 1_400_000)
	io.Name, io.Names = "io", []string{"worker", "io"}
	return p
}

// GoFixture returns the instrumented recording of a Go program that the
// golden files of --by goroutine are made of: process server (pid 5) has
// two threads. Goroutine 1 runs main on thread 5 and blocks in recv;
// thread 5 then runs goroutine 7, whose handle is preempted. Goroutine 1
// resumes on thread 6, where recv returns. Before it, thread 6 ran runtime
// code and goroutine 8's short handle. Samples are taken alongside.
func GoFixture() *model.Profile {
	b := NewHooks().Calibrate(30, 25, 40, 10).
		Thread(5, 5, "server").
		Thread(5, 6, "server")
	// Times are in µs.
	b.Run(5, 5, micro(`1000 go:1 1000 +main 1010 +recv 1011 s:main;recv 1012 go:7 1012 +handle 1050 s:handle;parse
		1060 preempt 1090 in 1100 -handle 1110 out`))
	b.Run(5, 6, micro(`1000 +mstart 1005 -mstart 1008 go:8 1009 +handle 1011 -handle 1015 go:1 1030 s:main;recv;copy
		1040 -recv 1050 -main 1060 out`))
	p := b.Profile()
	p.Header.Event, p.Header.Freq = "cpu-clock", 999
	p.Header.StartNS = 1_000_000
	for i := range p.Samples {
		p.Samples[i].Period = 1_001_001
	}
	return p
}

// micro multiplies the times of a script by 1000.
func micro(script string) string {
	f := strings.Fields(script)
	for i, tok := range f {
		if tok[0] >= '0' && tok[0] <= '9' {
			f[i] = tok + "000"
		}
	}
	return strings.Join(f, " ")
}

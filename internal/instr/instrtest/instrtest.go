// Package instrtest builds instrumented model.Profiles from short scripts
// for the tests of the instrumented analysis and its reports.
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
//	s:main;f;g   a sample, stack outermost first
//	irq:30       a hardware interrupt handled for 30ns, ending now
//	softirq:30   a softirq, likewise
//	go:17        the thread switches to goroutine 17
//	exit         the thread exits (its incarnation at this time)
//	pf:12 mig:3  the thread's page fault and migration counters
//
// Function names may carry a module, "f@/lib/libx.so" (default
// DefaultModule). Sample stacks use reporttest's syntax: ';' separates
// locations, '>' a function from the functions inlined into it. Sample
// locations are distinct from the function-entry locations of events,
// as in a real trace.
//
//	p := instrtest.New().Thread(1, 1, "app").
//		Run(1, 1, "0 +main 10 +f 30 -f 45 -main").Profile()
package instrtest

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

// DefaultModule is the module of functions that do not name one.
const DefaultModule = "/usr/bin/app"

// Builder accumulates a profile. The zero Builder is not usable; call New.
type Builder struct {
	p     *model.Profile
	locs  map[string]uint32
	nodes map[[2]uint32]uint32
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

// New returns a Builder for a hook recording without calibration, with
// an end record.
func New() *Builder {
	return &Builder{
		p: &model.Profile{
			Header: trace.Header{
				Version:    trace.Version,
				Clock:      "CLOCK_MONOTONIC",
				StartTime:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
				Event:      "dummy",
				Callchain:  "fp",
				Mode:       "normal",
				Instrument: "hook",
			},
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

// Run appends the records of script (see the package documentation) to
// thread tid of process pid. It panics on a malformed script.
func (b *Builder) Run(pid, tid uint32, script string) *Builder {
	var now uint64
	for _, tok := range strings.Fields(script) {
		switch {
		case tok[0] >= '0' && tok[0] <= '9':
			t, err := strconv.ParseUint(tok, 10, 64)
			if err != nil {
				panic(fmt.Sprintf("instrtest: bad time %q", tok))
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
				panic(fmt.Sprintf("instrtest: bad adjustment %q", tok))
			}
			b.p.Adjusts = append(b.p.Adjusts, model.Adjust{Time: now, PID: pid, TID: tid, Duration: d, Dropped: dropped})
		case strings.HasPrefix(tok, "s:"):
			b.p.Samples = append(b.p.Samples, model.Sample{Time: now, PID: pid, TID: tid, Period: 1, Stack: b.stack(tok[2:])})
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
			panic(fmt.Sprintf("instrtest: bad token %q", tok))
		}
	}
	return b
}

// number parses the number s of token tok, and panics if it is not one.
func number(tok, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("instrtest: bad token %q", tok))
	}
	return n
}

// Function returns the location id of the entry of function fn
// ("name" or "name@module"), creating it.
func (b *Builder) Function(fn string) uint32 {
	return b.location("entry", fn)
}

// location returns the location of a function entry (kind "entry") or of
// an address inside it (kind "sample").
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
	if kind == "sample" {
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

// stack returns the leaf stack node of a sample stack, creating what is
// missing; 0 for the empty stack.
func (b *Builder) stack(stack string) uint32 {
	var node uint32
	if stack == "" {
		return 0
	}
	for _, elem := range strings.Split(stack, ";") {
		loc := b.location("sample", elem)
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

// Random builds a profile of one to four threads of process 10, each a
// random well-nested timeline of calls among a few functions (recursion,
// direct and indirect, is common) with context switches, profiler
// pauses, interrupts, goroutine switches and samples whose stacks extend
// the traced stack with untraced frames. A thread may be created during
// the recording, exit before its end, and have its tid reused by a second
// incarnation. With calibrate set the header has a calibration whose
// overheads often exceed the intervals, so clamping at zero is exercised.
func Random(r *rand.Rand, calibrate bool) *model.Profile {
	names := []string{"a", "b", "c", "d", "e@/lib/libx.so"}
	b := New()
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

// randomRun appends Random's timeline of thread tid from time now, and
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

// Package reporttest builds model.Profiles from readable stacks for the
// tests of the reports and exports.
//
// A stack is written outermost first, one location per ';'-separated
// element: "main;compute;write@/lib/libc.so.6". Inside an element, '>'
// separates a function from the functions inlined into it, outer first:
// "compute>inl_helper" is one location whose physical function compute
// has inl_helper inlined. "@module" at the end of an element sets the
// location's module (default DefaultModule). The empty stack is a sample
// without a stack.
package reporttest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"trueprof/internal/instr/instrtest"
	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// DefaultModule is the module of locations that do not name one.
const DefaultModule = "/usr/bin/app"

// Builder accumulates a profile. The zero Builder is not usable; call New.
type Builder struct {
	p     *model.Profile
	locs  map[string]uint32
	nodes map[[2]uint32]uint32
	time  uint64
}

// New returns a Builder for a cpu-clock profile sampled every 1ms from
// 1s (trace clock), started at a fixed time so that reports of it are
// reproducible.
func New() *Builder {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return &Builder{
		p: &model.Profile{
			Header: trace.Header{
				Version:   trace.Version,
				Clock:     "CLOCK_MONOTONIC",
				StartTime: start,
				StartNS:   1_000_000_000,
				Event:     "cpu-clock",
				Period:    1_000_000,
				Callchain: "fp",
				Mode:      "normal",
			},
			Locations: make([]model.Location, 1),
			Stacks:    make([]model.StackNode, 1),
			End:       &model.End{Time: 9_000_000_000, Reason: "exited"},
		},
		locs:  map[string]uint32{},
		nodes: map[[2]uint32]uint32{},
		time:  1_000_000_000,
	}
}

// Thread records a thread; a thread whose tid is its pid also names the
// process.
func (b *Builder) Thread(pid, tid uint32, name string) *Builder {
	return b.ThreadAt(pid, tid, name, 0)
}

// ThreadAt is Thread for a thread created at time start: samples from
// then on are its, not those of an earlier thread with the same tid.
func (b *Builder) ThreadAt(pid, tid uint32, name string, start uint64) *Builder {
	b.p.Threads = append(b.p.Threads, &model.Thread{PID: pid, TID: tid, Name: name, Names: []string{name}, Start: start})
	if pid == tid && start == 0 {
		b.p.Processes = append(b.p.Processes, &model.Process{PID: pid, Name: name})
	}
	return b
}

// Add adds n samples of thread tid of process pid with the given stack,
// 1ms apart.
func (b *Builder) Add(pid, tid uint32, stack string, n int) *Builder {
	return b.add(pid, tid, stack, n, false)
}

// AddTruncated is Add for samples whose call chain was cut short.
func (b *Builder) AddTruncated(pid, tid uint32, stack string, n int) *Builder {
	return b.add(pid, tid, stack, n, true)
}

func (b *Builder) add(pid, tid uint32, stack string, n int, truncated bool) *Builder {
	leaf := b.stack(stack)
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

// stack returns the leaf stack node of stack, creating what is missing.
func (b *Builder) stack(stack string) uint32 {
	var node uint32
	if stack == "" {
		return 0
	}
	for _, elem := range strings.Split(stack, ";") {
		loc := b.location(elem)
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

func (b *Builder) location(elem string) uint32 {
	if id, ok := b.locs[elem]; ok {
		return id
	}
	funcs, module := elem, DefaultModule
	if i := strings.LastIndex(elem, "@"); i >= 0 {
		funcs, module = elem[:i], elem[i+1:]
	}
	names := strings.Split(funcs, ">")
	l := model.Location{Module: module}
	id := uint32(len(b.p.Locations))
	l.Offset = uint64(id) * 0x10
	l.Address = 0x400000 + l.Offset
	// Frames are innermost first; names are written outermost first.
	for i := len(names) - 1; i >= 0; i-- {
		l.Frames = append(l.Frames, model.Frame{Function: names[i], File: "src/" + names[i] + ".c", Line: 10 + i})
	}
	b.p.Locations = append(b.p.Locations, l)
	b.locs[elem] = id
	return id
}

// Profile returns the profile built so far, with processes and threads
// sorted as the model promises. The Builder must not be used afterwards.
func (b *Builder) Profile() *model.Profile {
	slices.SortFunc(b.p.Processes, func(x, y *model.Process) int { return cmp.Compare(x.PID, y.PID) })
	slices.SortStableFunc(b.p.Threads, func(x, y *model.Thread) int {
		return cmp.Or(cmp.Compare(x.PID, y.PID), cmp.Compare(x.TID, y.TID), cmp.Compare(x.Start, y.Start))
	})
	return b.p
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

// Random builds a profile from a few functions in two modules so
// that recursion (direct, indirect, through inlined frames) is common.
// It also has several threads, samples without a stack and truncated
// samples.
func Random(r *rand.Rand) *model.Profile {
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
	b := instrtest.New().Calibrate(300, 250, 400, 100).
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
	b := instrtest.New().Calibrate(30, 25, 40, 10).
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

// micro multiplies the times of an instrtest script by 1000.
func micro(script string) string {
	f := strings.Fields(script)
	for i, tok := range f {
		if tok[0] >= '0' && tok[0] <= '9' {
			f[i] = tok + "000"
		}
	}
	return strings.Join(f, " ")
}

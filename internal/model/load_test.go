package model

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"trueprof/internal/trace"
)

// writeTrace writes recs after interning names, and returns the file.
func writeTrace(t *testing.T, build func(w *trace.Writer) []trace.Record) []byte {
	return writeTraceOf(t, &trace.Header{Event: "cpu-clock", Freq: 999}, build)
}

// writeTraceOf is writeTrace with header h.
func writeTraceOf(t *testing.T, h *trace.Header, build func(w *trace.Writer) []trace.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, h, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range build(w) {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func intern(t *testing.T, w *trace.Writer, s string) uint32 {
	id, err := w.Intern(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestLoad(t *testing.T) {
	data := writeTrace(t, func(w *trace.Writer) []trace.Record {
		prog, main, work, libc := intern(t, w, "prog"), intern(t, w, "main"), intern(t, w, "work"), intern(t, w, "/lib/libc.so.6")
		exited := intern(t, w, "exited")
		return []trace.Record{
			&trace.Comm{Time: 1, PID: 10, TID: 10, Name: prog, Exec: true},
			&trace.Location{ID: 1, Address: 0x1000, Module: libc, Offset: 0x1000, Lines: []trace.Line{{Function: main}}},
			&trace.Location{ID: 2, Address: 0x2000, Module: libc, Offset: 0x2000, Lines: []trace.Line{{Function: work, Line: 7}, {Function: main}}},
			&trace.Location{ID: 3, Address: 0x3000, Module: libc, Offset: 0x3000},
			&trace.StackNode{ID: 1, Parent: 0, Location: 1},
			&trace.StackNode{ID: 2, Parent: 1, Location: 2},
			&trace.Fork{Time: 5, PID: 10, PPID: 10, TID: 11, PTID: 10},
			&trace.Sample{Time: 9, PID: 10, TID: 11, Period: 1000, Stack: 2, Flags: trace.SampleTruncated},
			&trace.Sample{Time: 7, PID: 10, TID: 10, Period: 1000, Stack: 1, Flags: trace.SampleKernel},
			&trace.Lost{Time: 10, Kind: trace.LostKernel, Count: 3},
			&trace.Lost{Time: 10, Kind: trace.LostSize, Count: 2},
			&trace.Throttle{Time: 11},
			&trace.Throttle{Time: 12, Unthrottle: true},
			&trace.Exit{Time: 13, PID: 10, PPID: 10, TID: 11, PTID: 10},
			&trace.End{Time: 20, ExitCode: 3, Reason: exited},
		}
	})
	p, err := Load(bytes.NewReader(data))
	if err != nil || p.Err != nil {
		t.Fatalf("%v %v", err, p.Err)
	}
	if len(p.Samples) != 2 || p.Samples[0].Time != 7 || !p.Samples[0].Kernel || !p.Samples[1].Truncated || p.Truncated != 1 {
		t.Errorf("samples %+v (sorted by time, flags kept)", p.Samples)
	}
	if p.Lost != (LostCounts{Kernel: 3, Size: 2}) || p.Lost.Total() != 5 || p.Throttled != 1 {
		t.Errorf("lost %+v throttled %d", p.Lost, p.Throttled)
	}
	if p.End == nil || p.End.ExitCode != 3 || p.End.Reason != "exited" {
		t.Errorf("end %+v", p.End)
	}
	th := p.Thread(10, 11)
	if th == nil || th.Name != "prog" || th.Start != 5 || th.End != 13 {
		t.Errorf("new thread %+v: inherits its creator's name, has fork and exit times", th)
	}
	if pr := p.Process(10); pr == nil || pr.Name != "prog" {
		t.Errorf("process %+v", pr)
	}
	if got := p.Stack(2, nil); len(got) != 2 || got[0] != 2 || got[1] != 1 {
		t.Errorf("Stack(2) = %v, want [2 1]", got)
	}
	if f := p.Locations[2].Frames; len(f) != 2 || f[0].Function != "work" || f[0].Line != 7 || f[1].Function != "main" {
		t.Errorf("inline frames %+v", f)
	}
	if f := p.Locations[3].Frames; len(f) != 1 || f[0].Function != "/lib/libc.so.6+0x3000" {
		t.Errorf("unnamed location %+v", f)
	}
}

// TestLoadRename: a Rename record names a location already used by
// samples, for every use; a trace cut off before it still loads, with
// the location as first written and the same stacks.
func TestLoadRename(t *testing.T) {
	data := writeTrace(t, func(w *trace.Writer) []trace.Record {
		jit, hot, main, exe := intern(t, w, "[jit]"), intern(t, w, "jit_hot_loop"), intern(t, w, "main"), intern(t, w, "/bin/prog")
		for _, r := range []trace.Record{
			&trace.Location{ID: 1, Address: 0x1000, Module: exe, Offset: 0x1000, Lines: []trace.Line{{Function: main}}},
			&trace.Location{ID: 2, Address: 0x7f00, Module: jit, Offset: 0x7f00, Lines: []trace.Line{{Function: jit}}},
			&trace.StackNode{ID: 1, Parent: 0, Location: 1},
			&trace.StackNode{ID: 2, Parent: 1, Location: 2},
			&trace.Sample{Time: 7, PID: 10, TID: 10, Period: 1000, Stack: 2},
		} {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		// The names come in a chunk of their own, as at the end of a
		// recording: the cut below removes that chunk.
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return []trace.Record{
			&trace.Rename{ID: 2, Lines: []trace.Line{{Function: hot, File: exe, Line: 3}}},
			&trace.End{Time: 20},
		}
	})
	leaf := func(p *Profile) Frame {
		return p.Locations[p.Stacks[p.Samples[0].Stack].Location].Frames[0]
	}
	p, err := Load(bytes.NewReader(data))
	if err != nil || p.Err != nil {
		t.Fatalf("%v %v", err, p.Err)
	}
	if got := leaf(p); got != (Frame{Function: "jit_hot_loop", File: "/bin/prog", Line: 3}) || p.Locations[2].Module != "[jit]" {
		t.Errorf("renamed leaf %+v in %q, want jit_hot_loop in [jit]", got, p.Locations[2].Module)
	}
	cut := data[:bytes.LastIndex(data, []byte("TPCK"))]
	p, err = Load(bytes.NewReader(cut))
	if err != nil || !errors.Is(p.Err, ErrNoEnd) {
		t.Fatalf("cut trace: %v, %v", err, p.Err)
	}
	if got := leaf(p); got.Function != "[jit]" || len(p.Stacks) != 3 || len(p.Samples) != 1 {
		t.Errorf("cut trace: leaf %+v, %d stack nodes, %d samples; want [jit], 3, 1", got, len(p.Stacks), len(p.Samples))
	}
}

func TestLoadInconsistent(t *testing.T) {
	tests := []struct {
		name string
		recs func(w *trace.Writer) []trace.Record
	}{
		{"undefined string", func(w *trace.Writer) []trace.Record {
			return []trace.Record{&trace.Comm{PID: 1, TID: 1, Name: 99}}
		}},
		{"location out of sequence", func(w *trace.Writer) []trace.Record {
			return []trace.Record{&trace.Location{ID: 5}}
		}},
		{"stack node cycle", func(w *trace.Writer) []trace.Record {
			return []trace.Record{&trace.Location{ID: 1}, &trace.StackNode{ID: 1, Parent: 1, Location: 1}}
		}},
		{"rename of undefined location", func(w *trace.Writer) []trace.Record {
			return []trace.Record{&trace.Location{ID: 1}, &trace.Rename{ID: 2}}
		}},
		{"rename with undefined string", func(w *trace.Writer) []trace.Record {
			return []trace.Record{&trace.Location{ID: 1}, &trace.Rename{ID: 1, Lines: []trace.Line{{Function: 99}}}}
		}},
		{"sample on undefined stack", func(w *trace.Writer) []trace.Record {
			return []trace.Record{&trace.Sample{PID: 1, TID: 1, Stack: 4}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Load(bytes.NewReader(writeTrace(t, tt.recs)))
			if err != nil {
				t.Fatal(err)
			}
			var fe *trace.FormatError
			if !errors.As(p.Err, &fe) || !errors.Is(p.Err, trace.ErrCorrupt) {
				t.Errorf("Err = %v, want a *trace.FormatError wrapping ErrCorrupt", p.Err)
			}
		})
	}
}

func TestLoadNoEnd(t *testing.T) {
	data := writeTrace(t, func(w *trace.Writer) []trace.Record { return nil })
	p, err := Load(bytes.NewReader(data))
	if err != nil || !errors.Is(p.Err, ErrNoEnd) {
		t.Errorf("trace without End: %v, %v", err, p.Err)
	}
}

// TestThreadIncarnations checks that a thread id the kernel reused after
// its thread exited is a second Thread, and that records find their own
// incarnation, with and without a Fork record for the second one.
func TestThreadIncarnations(t *testing.T) {
	data := writeTrace(t, func(w *trace.Writer) []trace.Record {
		first, second, third := intern(t, w, "first"), intern(t, w, "second"), intern(t, w, "third")
		return []trace.Record{
			&trace.Fork{Time: 10, PID: 1, PPID: 1, TID: 7, PTID: 1},
			&trace.Comm{Time: 11, PID: 1, TID: 7, Name: first},
			&trace.Counter{Time: 20, PID: 1, TID: 7, Kind: trace.CounterPageFaults, Value: 3},
			&trace.Exit{Time: 20, PID: 1, PPID: 1, TID: 7, PTID: 1},
			&trace.Fork{Time: 30, PID: 1, PPID: 1, TID: 7, PTID: 1},
			&trace.Comm{Time: 31, PID: 1, TID: 7, Name: second},
			&trace.Exit{Time: 40, PID: 1, PPID: 1, TID: 7, PTID: 1},
			&trace.Counter{Time: 41, PID: 1, TID: 7, Kind: trace.CounterPageFaults, Value: 5},
			// No Fork record: an id reused while recording was attached
			// late, or its Fork lost.
			&trace.Comm{Time: 50, PID: 1, TID: 7, Name: third},
			&trace.GoID{Time: 51, PID: 1, TID: 7, GoID: 9},
			&trace.IRQ{Time: 52, PID: 1, TID: 7, CPU: 1, Kind: trace.IRQHard, Vector: 4, Duration: 100},
		}
	})
	p, err := Load(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Threads) != 3 {
		t.Fatalf("%d threads, want 3 incarnations of tid 7: %+v", len(p.Threads), p.Threads)
	}
	for i, want := range []struct {
		name       string
		start, end uint64
		faults     uint64
	}{{"first", 10, 20, 3}, {"second", 30, 40, 5}, {"third", 50, 0, 0}} {
		th := p.Threads[i]
		if th.Name != want.name || th.Start != want.start || th.End != want.end || th.Counters[trace.CounterPageFaults] != want.faults {
			t.Errorf("thread %d: %+v, want %+v", i, th, want)
		}
	}
	for _, c := range []struct {
		at   uint64
		want string
	}{{0, "first"}, {15, "first"}, {29, "first"}, {30, "second"}, {45, "second"}, {50, "third"}, {99, "third"}} {
		if th := p.ThreadAt(1, 7, c.at); th == nil || th.Name != c.want {
			t.Errorf("ThreadAt(1, 7, %d) = %+v, want %s", c.at, th, c.want)
		}
	}
	lookup := p.NewThreadLookup()
	for at := uint64(0); at < 100; at++ {
		if got, want := lookup.At(1, 7, at), p.ThreadAt(1, 7, at); got != want {
			t.Errorf("ThreadLookup.At(1, 7, %d) = %+v, ThreadAt says %+v", at, got, want)
		}
	}
	if th := p.ThreadAt(1, 8, 10); th != nil {
		t.Errorf("ThreadAt of an unknown thread = %+v", th)
	}
	for _, c := range []struct {
		at          uint64
		want        string
		from, until uint64
	}{{0, "first", 0, 30}, {29, "first", 0, 30}, {30, "second", 30, 50}, {50, "third", 50, math.MaxUint64}} {
		th, from, until := p.ThreadSpan(1, 7, c.at)
		if th == nil || th.Name != c.want || from != c.from || until != c.until {
			t.Errorf("ThreadSpan(1, 7, %d) = %+v, %d, %d; want %s, %d, %d", c.at, th, from, until, c.want, c.from, c.until)
		}
	}
	if th, from, until := p.ThreadSpan(1, 8, 10); th != nil || from != 0 || until != math.MaxUint64 {
		t.Errorf("ThreadSpan of an unknown thread = %+v, %d, %d", th, from, until)
	}
	if len(p.GoIDs) != 1 || p.GoIDs[0].GoID != 9 || len(p.IRQs) != 1 || p.IRQs[0].Duration != 100 || p.IRQs[0].Soft {
		t.Errorf("GoIDs %+v, IRQs %+v", p.GoIDs, p.IRQs)
	}
}

// TestLaunchedThreadStartsAtExec checks that a launched command's first
// thread is recorded from its exec, when its events were enabled, and
// not from when the recorder started: it ran the exec wrapper before.
func TestLaunchedThreadStartsAtExec(t *testing.T) {
	for _, launched := range []bool{true, false} {
		h := &trace.Header{Event: "cpu-clock", StartNS: 100}
		if launched {
			h.Command = []string{"prog"}
		}
		data := writeTraceOf(t, h, func(w *trace.Writer) []trace.Record {
			return []trace.Record{
				&trace.Comm{Time: 150, PID: 3, TID: 3, Name: intern(t, w, "prog"), Exec: true},
				&trace.Switch{Time: 160, PID: 3, TID: 3, Out: true},
			}
		})
		p, err := Load(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0) // attached: it existed before recording
		if launched {
			want = 150
		}
		if got := p.Thread(3, 3).Start; got != want {
			t.Errorf("launched %v: start %d, want %d", launched, got, want)
		}
	}
}

// TestLabels loads label changes written out of time order and finds a
// goroutine's labels at a time: set, changed, cleared, per process.
func TestLabels(t *testing.T) {
	data := writeTrace(t, func(w *trace.Writer) []trace.Record {
		worker, one, two, phase := intern(t, w, "worker"), intern(t, w, "1"), intern(t, w, "2"), intern(t, w, "phase")
		return []trace.Record{
			&trace.Labels{Time: 20, PID: 1, GoID: 5, Pairs: []trace.LabelPair{{Key: phase, Value: one}, {Key: worker, Value: two}}},
			&trace.Labels{Time: 10, PID: 1, GoID: 5, Pairs: []trace.LabelPair{{Key: worker, Value: one}}, Truncated: true},
			&trace.Labels{Time: 30, PID: 1, GoID: 5},
			&trace.Labels{Time: 15, PID: 2, GoID: 5, Pairs: []trace.LabelPair{{Key: worker, Value: two}}},
		}
	})
	p, err := Load(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Labels) != 4 || p.Labels[0].Time != 10 || !p.Labels[0].Truncated || p.Labels[1].PID != 2 {
		t.Fatalf("labels %+v", p.Labels)
	}
	idx := p.GoLabels()
	for _, c := range []struct {
		pid  uint32
		goid uint64
		at   uint64
		want string
	}{
		{1, 5, 9, ""}, {1, 5, 10, "worker=1"}, {1, 5, 19, "worker=1"}, {1, 5, 20, "phase=1 worker=2"},
		{1, 5, 30, ""}, {1, 6, 20, ""}, {2, 5, 14, ""}, {2, 5, 99, "worker=2"},
	} {
		var got []string
		for _, l := range idx.At(c.pid, c.goid, c.at) {
			got = append(got, l.Key+"="+l.Value)
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("At(%d, %d, %d) = %q, want %q", c.pid, c.goid, c.at, s, c.want)
		}
	}
	// A label naming a string that was never written is corrupt.
	bad := writeTrace(t, func(w *trace.Writer) []trace.Record {
		return []trace.Record{&trace.Labels{Time: 1, PID: 1, GoID: 1, Pairs: []trace.LabelPair{{Key: 99}}}}
	})
	if p, err := Load(bytes.NewReader(bad)); err == nil && p.Err == nil {
		t.Error("a label with an undefined string loaded")
	}
}

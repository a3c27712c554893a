package record

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"trueprof/internal/hook"
	"trueprof/internal/perf"
	"trueprof/internal/resolve"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// BenchmarkHookPath feeds the hook batches of a recorded dense load
// (testutil.CallsC, 500,000 mid calls: 3,000,002 events) through the
// recorder's per-event path as the final drain does: decoding, the
// merge, resolution, encoding and compression, the trace written to
// io.Discard. It reports the events per second the recorder sustains
// (the wall time of the whole path, every stage on the cores it finds,
// as in a recording after the target has exited).
func BenchmarkHookPath(b *testing.B) {
	const mids = 500_000
	batches, events := recordHookBatches(b, mids)
	b.ResetTimer()
	cpu := cpuTime(b)
	for b.Loop() {
		replayHookBatches(b, batches, 6*mids+2)
	}
	per := float64(b.N) * float64(events)
	b.ReportMetric(per/b.Elapsed().Seconds()/1e6, "Mevents/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/per, "ns/event")
	// The CPU time of all stages: what a loaded machine leaves alone.
	b.ReportMetric(float64(cpuTime(b)-cpu)/per, "cpu-ns/event")
}

// cpuTime is the process's user and system CPU time so far, in ns.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// recordHookBatches runs the dense load with the hook library recording
// into a region and returns the batches copied out of it, as the
// drainer fills them, and their number of records.
func recordHookBatches(b *testing.B, mids int) ([]*hook.Batch, int) {
	b.Helper()
	bin := testutil.BuildC(b, b.TempDir(), "calls", testutil.CallsC, "-O1", "-fno-inline", "-finstrument-functions")
	r, err := hook.NewRegion(hook.Options{})
	if err != nil {
		testutil.Missing(b, "hook region: "+err.Error())
	}
	defer r.Close()
	cmd := exec.Command(bin, strconv.Itoa(mids))
	cmd.ExtraFiles = []*os.File{r.File()}
	cmd.Env = append(os.Environ(), r.Env(3)...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var batches []*hook.Batch
	fill := func(final bool) {
		for {
			if len(batches) == 0 || batches[len(batches)-1].Full() {
				batches = append(batches, hook.NewBatch(hookChunk))
			}
			if !r.DrainBatch(batches[len(batches)-1], final) {
				return
			}
		}
	}
	for done := false; !done; {
		select {
		case err := <-exited:
			if err != nil {
				b.Fatal(err)
			}
			done = true
		case <-time.After(time.Millisecond):
		}
		fill(done)
	}
	n := 0
	for _, bt := range batches {
		n += bt.Len()
	}
	// Beside the entries and exits, the hooks' waits for ring space
	// (adjust records) when the drains fell behind.
	if n < 6*mids+2 {
		b.Fatalf("recorded %d records, want at least %d", n, 6*mids+2)
	}
	return batches, n
}

// newTestHookQueue returns a hook source without a region or goroutines,
// released when the test ends.
func newTestHookQueue(tb testing.TB) *hookSource {
	h, err := newHookQueue(nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		h.ready.Close()
		h.halt.Close()
		h.spool.Close()
	})
	return h
}

// replayHookBatches passes batches through a hook source and a session
// writing to io.Discard, and checks that all their events, entries and
// exits, were written.
func replayHookBatches(b *testing.B, batches []*hook.Batch, events uint64) {
	// record's defaults: normal mode, --size 256M.
	w, err := trace.NewWriter(io.Discard, &trace.Header{Event: "hooks", Clock: "CLOCK_MONOTONIC"},
		trace.Options{Mode: trace.ModeNormal, SizeLimit: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	h := newTestHookQueue(b)
	// As finish leaves it: the drainer stopped, the batches to decode.
	h.full, h.closed = append([]*hook.Batch(nil), batches...), true
	go h.decode()
	defer func() { <-h.decodeEnd }()
	s := &session{w: w, log: io.Discard, res: resolve.New(w, io.Discard, resolve.Options{}), sources: []eventSource{h}}
	for more := true; more; {
		more = s.collectEvents(false, math.MaxUint64)
		if err := s.merge(0, 0, len(s.pendingEvents)); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if s.result.Events != events {
		b.Fatalf("%d events written, want %d", s.result.Events, events)
	}
}

// TestHookSourceCloseUndrained: a hook source whose slabs nobody takes
// (the recording loop ended on an error) still closes: its decoder,
// waiting for a spare slab, quits instead of holding close forever.
func TestHookSourceCloseUndrained(t *testing.T) {
	r, err := hook.NewRegion(hook.Options{Threads: 1, Events: 1 << 10})
	if err != nil {
		testutil.Missing(t, "hook region: "+err.Error())
	}
	h, err := newHookQueue(r)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 * hookSlabs {
		h.full = append(h.full, hook.NewBatch(hookChunk))
	}
	go h.run()
	go h.decode()
	closed := make(chan error, 1)
	go func() { closed <- h.close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return within 10 s")
	}
	select {
	case <-h.decodeEnd:
	default:
		t.Error("the decoder goroutine still runs after close")
	}
}

// TestHookSourceHoldsLateSlabs: a slab whose events all come after the
// session's horizon stays in the source, which says when its earliest
// event is, and is handed over once the horizon passes it.
func TestHookSourceHoldsLateSlabs(t *testing.T) {
	h := newTestHookQueue(t)
	slab := &hookSlab{evs: []instrEvent{{time: 200}, {time: 150}, {time: 300}}, first: 150}
	h.slabs = []*hookSlab{slab}
	evs, _, _, next := h.drainInto(nil, 150)
	if len(evs) != 0 || next != 150 || len(h.slabs) != 1 {
		t.Fatalf("horizon 150: took %d events, next %d, %d slabs left: want 0, 150, 1", len(evs), next, len(h.slabs))
	}
	evs, _, ordered, next := h.drainInto(nil, 151)
	if len(evs) != 3 || next != 0 || len(h.slabs) != 0 || ordered {
		t.Fatalf("horizon 151: took %d events (ordered %v), next %d, %d slabs left: want 3, unordered, 0, 0", len(evs), ordered, next, len(h.slabs))
	}

	// A due slab behind one that is not: the oldest goes, and the due
	// one is next.
	h.slabs = []*hookSlab{{evs: []instrEvent{{time: 200}}, first: 200, ordered: true}, {evs: []instrEvent{{time: 100}}, first: 100, ordered: true}}
	evs, _, _, next = h.drainInto(nil, 150)
	if len(evs) != 1 || evs[0].time != 200 || next != 100 {
		t.Fatalf("a due slab behind a later one: took %v, next %d: want the 200 one, next 100", evs, next)
	}
	h.slabs = nil

	// A time too far ahead to be real (a ring the target overwrote) is
	// not waited for, nor is anything at the end.
	now := uint64(10 * time.Second)
	for _, c := range []struct{ first, before uint64 }{{now + uint64(2*time.Second), now}, {math.MaxUint64, now}, {math.MaxUint64, math.MaxUint64}} {
		h.slabs = []*hookSlab{{evs: []instrEvent{{time: c.first}}, first: c.first, ordered: true}}
		if evs, _, _, _ = h.drainInto(nil, c.before); len(evs) != 1 {
			t.Errorf("slab at %d, horizon %d: held", c.first, c.before)
		}
	}
}

// TestHookPusherFirst: the decoder's pusher keeps the earliest time of
// a slab whose threads interleave, which drainInto compares with the
// horizon.
func TestHookPusherFirst(t *testing.T) {
	h := &hookSource{}
	push := h.pusher()
	h.dst = make([]instrEvent, 0, 4)
	h.last, h.unordered, h.first = 0, false, math.MaxUint64
	for _, tm := range []uint64{5, 7, 3, 4} {
		push(&hook.Event{Time: tm, Kind: hook.KindEntry})
	}
	if h.first != 3 || !h.unordered {
		t.Errorf("first %d, unordered %v: want 3, true", h.first, h.unordered)
	}
}

// TestMergeWritesEventsAsProcessEvent: merge, which writes the common
// hook event itself, writes the same trace, byte for byte, and counts
// the same, as processEvent for every event in the same order, over
// two threads' interleaved calls of a few hundred functions with gaps,
// adjustments, a mapping that empties the resolver's caches and a
// pause.
func TestMergeWritesEventsAsProcessEvent(t *testing.T) {
	const base = 0x7f0000000000
	records := []perf.Record{
		{Type: perf.RecordComm, PID: 7, TID: 7, Time: 90, Comm: "prog"},
		{Type: perf.RecordMmap2, PID: 7, TID: 7, Time: 100, Addr: base, Len: 0x100000, Prot: syscall.PROT_READ | syscall.PROT_EXEC, Filename: "/nonexistent/prog"},
		{Type: perf.RecordFork, PID: 7, PPID: 7, TID: 8, PTID: 7, Time: 120},
		{Type: perf.RecordMmap2, PID: 7, TID: 7, Time: 50_000, Addr: base + 0x200000, Len: 0x10000, Prot: syscall.PROT_READ | syscall.PROT_EXEC, Filename: "/nonexistent/lib"},
	}
	var events []instrEvent
	tm := uint64(1000)
	for i := range 20_000 {
		tid := uint32(7 + i/40%2)
		tm += uint64(3 + i%50)
		if i%500 == 499 {
			tm += 1000
		}
		e := instrEvent{time: tm, pid: 7, tid: tid, kind: trace.EventEntry + trace.EventKind(i%2), addr: base + 0x1000 + uint64(i%300)*0x40}
		if i%1000 == 999 {
			e = instrEvent{time: tm, pid: 7, tid: tid, addr: 50}
			if i%3 != 0 {
				e.kind, e.addr = eventDropped, uint64(i%3)
			}
		}
		events = append(events, e)
	}
	pause := pauseSpan{start: 200_000, end: 210_000}

	write := func(merged bool) ([]byte, Result, uint64) {
		var buf bytes.Buffer
		w, err := trace.NewWriter(&buf, &trace.Header{Event: "hooks", Clock: "CLOCK_MONOTONIC"}, trace.Options{ChunkSize: 16 << 10})
		if err != nil {
			t.Fatal(err)
		}
		s := &session{w: w, log: io.Discard, res: resolve.New(w, io.Discard, resolve.Options{})}
		s.ctl.closed = []pauseSpan{pause}
		s.pending = slices.Clone(records)
		s.pendingEvents = slices.Clone(events)
		if merged {
			if err := s.merge(0, len(s.pending), len(s.pendingEvents)); err != nil {
				t.Fatal(err)
			}
		} else {
			i := 0
			for j := range s.pendingEvents {
				for ; i < len(s.pending) && s.pending[i].Time <= s.pendingEvents[j].time; i++ {
					if err := s.process(&s.pending[i]); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.processEvent(&s.pendingEvents[j]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), s.result, s.ctl.dropped
	}
	want, wantResult, wantDropped := write(false)
	got, gotResult, gotDropped := write(true)
	if !bytes.Equal(got, want) {
		t.Errorf("merge wrote %d bytes, processEvent %d: they differ", len(got), len(want))
	}
	if gotResult.Events != wantResult.Events || gotResult.Lost != wantResult.Lost || gotDropped != wantDropped {
		t.Errorf("merge: %d events, %d lost, %d dropped in the pause; processEvent: %d, %d, %d",
			gotResult.Events, gotResult.Lost, gotDropped, wantResult.Events, wantResult.Lost, wantDropped)
	}
	if wantDropped == 0 || wantResult.Events < 15_000 {
		t.Errorf("processEvent wrote %d events, dropped %d in the pause: the stream misses its cases", wantResult.Events, wantDropped)
	}
}

// BenchmarkMergeEvents is the recording loop's share of
// BenchmarkHookPath alone: merge over the decoded events of a dense
// call load (one thread, calls 15-40 ns apart), the trace written to
// io.Discard, its compression on the writer's own goroutine. ns/event
// is the loop's time. The load calls three functions, as the dense
// fixture does, or 1,000, as a real program's hot code can (whose
// location ids, over 255, take wide runs).
func BenchmarkMergeEvents(b *testing.B) {
	for _, funcs := range []uint64{3, 1000} {
		b.Run(fmt.Sprintf("functions=%d", funcs), func(b *testing.B) { benchmarkMerge(b, funcs) })
	}
}

func benchmarkMerge(b *testing.B, funcs uint64) {
	const base = 0x400000
	events := make([]instrEvent, 1<<20)
	tm := uint64(1e9)
	for i := range events {
		tm += uint64(15 + i%26)
		// Each function called twice in a row, the next one a prime
		// stride on: not in address order.
		fn := uint64(i/2) * 7 % funcs
		events[i] = instrEvent{time: tm, pid: 7, tid: 7, kind: trace.EventEntry + trace.EventKind(i%2), addr: base + 0x40*fn}
	}
	records := []perf.Record{
		{Type: perf.RecordComm, PID: 7, TID: 7, Time: 90, Comm: "calls"},
		{Type: perf.RecordMmap2, PID: 7, TID: 7, Time: 100, Addr: base, Len: 0x10000, Prot: syscall.PROT_READ | syscall.PROT_EXEC, Filename: "/nonexistent/calls"},
	}
	w, err := trace.NewWriter(io.Discard, &trace.Header{Event: "hooks", Clock: "CLOCK_MONOTONIC"},
		trace.Options{Mode: trace.ModeNormal, SizeLimit: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	s := &session{w: w, log: io.Discard, res: resolve.New(w, io.Discard, resolve.Options{})}
	s.pending = slices.Clone(records)
	if err := s.merge(0, len(s.pending), 0); err != nil {
		b.Fatal(err)
	}
	buf := make([]instrEvent, len(events))
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		copy(buf, events)
		s.pendingEvents = buf
		b.StartTimer()
		if err := s.merge(0, 0, len(buf)); err != nil {
			b.Fatal(err)
		}
		// Each pass's times start afresh: the writer takes them as
		// going backwards, in a full event record, once a pass.
	}
	if want := uint64(b.N) * uint64(len(events)); s.result.Events != want {
		b.Fatalf("%d events written, want %d", s.result.Events, want)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
}

// TestInstrEventSize: an instrEvent stays half a cache line, which the
// recording loop's speed depends on (instrEvent's doc comment).
func TestInstrEventSize(t *testing.T) {
	if n := unsafe.Sizeof(instrEvent{}); n != 32 {
		t.Errorf("an instrEvent takes %d bytes, want 32", n)
	}
}

// TestHookPusherAdjustments: the pusher turns a hook's wait into an
// adjustment stamped at its end that carries its duration, and lost
// events into an eventDropped that carries their number.
func TestHookPusherAdjustments(t *testing.T) {
	h := &hookSource{}
	push := h.pusher()
	h.dst = make([]instrEvent, 0, 2)
	push(&hook.Event{Time: 100, PID: 1, TID: 2, Kind: hook.KindAdjust, Duration: 30})
	push(&hook.Event{Time: 200, PID: 1, TID: 2, Kind: hook.KindAdjust, Dropped: 7})
	want := []instrEvent{
		{time: 130, pid: 1, tid: 2, addr: 30},
		{time: 200, pid: 1, tid: 2, addr: 7, kind: eventDropped},
	}
	if !slices.Equal(h.dst, want) {
		t.Errorf("pushed %+v, want %+v", h.dst, want)
	}
}

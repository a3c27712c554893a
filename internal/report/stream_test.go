package report_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
	"trueprof/internal/trace"
)

// streamOptions are the reports TestWriteStreamEqualsWrite renders both
// ways: every view and format, under thread filters, a minimum, --by
// goroutine, --root, --raw and another metric (errors included: both
// ways must refuse alike).
func streamOptions() []report.Options {
	var opts []report.Options
	for _, view := range report.Views() {
		for _, format := range report.Formats() {
			opts = append(opts,
				report.Options{View: view, Format: format},
				report.Options{View: view, Format: format, Filter: model.Filter{PID: 7, HasPID: true}},
				report.Options{View: view, Format: format, Filter: model.Filter{TID: 8, HasTID: true}, Min: 5},
				report.Options{View: view, Format: format, Filter: model.Filter{Thread: "work*"}},
				report.Options{View: view, Format: format, By: "goroutine"},
				report.Options{View: view, Format: format, Root: "mid"},
				report.Options{View: view, Format: format, Raw: true, Metric: "cpu"},
			)
		}
	}
	return opts
}

// reportBoth renders o of the trace at path loaded (model.Open, Write)
// and streamed (model.OpenStream, WriteStream). It returns false when
// the trace cannot stream.
func reportBoth(t *testing.T, path string, o report.Options) (loaded, streamed string, ok bool) {
	t.Helper()
	p, s := modeltest.OpenBoth(t, path)
	var lb, sb bytes.Buffer
	lerr := report.Write(&lb, p, o)
	serr := report.WriteStream(&sb, s, o)
	if errors.Is(serr, model.ErrNotStreamable) {
		if sb.Len() > 0 {
			t.Errorf("%s %+v: WriteStream wrote %d bytes before refusing", path, o, sb.Len())
		}
		return "", "", false
	}
	if lerr != nil || serr != nil {
		return fmt.Sprint("error: ", lerr), fmt.Sprint("error: ", serr), true
	}
	return lb.String(), sb.String(), true
}

// TestWriteStreamEqualsWrite renders every trace fixture and random
// recordings written as traces (threads whose records come out of order
// across them, as the rings write them) both ways, with many option
// sets: the streamed report is the loaded one, byte for byte, and a
// trace the stream refuses (wrap mode's late samples) is refused before
// anything is written.
func TestWriteStreamEqualsWrite(t *testing.T) {
	files, _ := filepath.Glob("../trace/testdata/*.trace")
	if len(files) == 0 {
		t.Fatal("no trace fixtures")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(12, 1))
	for i := range 30 {
		path := filepath.Join(dir, fmt.Sprintf("random-%d.trace", i))
		writeRandomTrace(t, path, r)
		files = append(files, path)
	}
	streamedAny, errs := 0, 0
	for _, path := range files {
		for _, o := range streamOptions() {
			loaded, streamed, ok := reportBoth(t, path, o)
			if !ok {
				continue
			}
			streamedAny++
			if strings.HasPrefix(loaded, "error") {
				errs++
			}
			if loaded != streamed {
				t.Errorf("%s %+v: the streamed report differs:\n--- loaded\n%s\n--- streamed\n%s", filepath.Base(path), o, loaded, streamed)
			}
		}
	}
	t.Logf("%d reports compared, %d of them errors", streamedAny, errs)
	if streamedAny < 30*len(streamOptions()) {
		t.Errorf("only %d reports streamed", streamedAny)
	}
}

// TestWriteStreamLabels: a label filter selects records in memory, so
// WriteStream refuses it (model.ErrNotStreamable) for the caller to load
// the trace.
func TestWriteStreamLabels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "labels.trace")
	writeRandomTrace(t, path, rand.New(rand.NewPCG(1, 2)))
	s, err := model.OpenStream(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	err = report.WriteStream(&buf, s, report.Options{View: "flat", Format: "text", Filter: model.Filter{Labels: []string{"job=a"}}})
	if !errors.Is(err, model.ErrNotStreamable) || buf.Len() > 0 {
		t.Errorf("WriteStream with a label filter: %v, %d bytes; want ErrNotStreamable and nothing written", err, buf.Len())
	}
}

// writeRandomTrace writes a random recording of process 7 to path: two
// to four threads (named main, worker-N) making random nested calls of
// main, mid and leaf with context switches, samples of random stacks
// (some truncated), goroutine switches, exits lost at random, each
// thread's records in blocks written out of order across threads, as
// the recorder's per-thread rings write them.
func writeRandomTrace(t *testing.T, path string, r *rand.Rand) {
	t.Helper()
	w := modeltest.NewTraceFile(t, path, &trace.Header{Event: "cpu-clock", Freq: 1000, Instrument: "hook"}, "main", "mid", "leaf", "helper")
	// Stack nodes: 1 main, 2 main>mid, 3 main>mid>leaf, 4 main>helper.
	for _, n := range []trace.StackNode{{ID: 1, Location: 1}, {ID: 2, Parent: 1, Location: 2}, {ID: 3, Parent: 2, Location: 3}, {ID: 4, Parent: 1, Location: 4}} {
		w.Write(&n)
	}
	w.Write(&trace.Comm{Time: 1000, PID: 7, TID: 7, Name: w.Intern("main"), Exec: true})
	threads := 2 + r.IntN(3)
	for k := 1; k < threads; k++ {
		tid := uint32(7 + k)
		w.Write(&trace.Fork{Time: 1000 + uint64(k), PID: 7, PPID: 7, TID: tid, PTID: 7})
		w.Write(&trace.Comm{Time: 1000 + uint64(k), PID: 7, TID: tid, Name: w.Intern(fmt.Sprintf("worker-%d", k))})
	}
	blocks := 5 + r.IntN(10)
	now := make([]uint64, threads)
	depth := make([]int, threads)
	for k := range now {
		now[k] = 2000 + uint64(k)*3
	}
	for range blocks {
		// Each block of every thread, the later threads' first.
		for k := threads - 1; k >= 0; k-- {
			tid := uint32(7 + k)
			for range 20 + r.IntN(40) {
				now[k] += 1 + uint64(r.IntN(50))
				at := now[k]
				switch x := r.IntN(20); {
				case x < 8 && depth[k] < 3:
					depth[k]++
					w.Write(&trace.Event{Time: at, PID: 7, TID: tid, Kind: trace.EventEntry, Function: uint32(min(depth[k], 3) + r.IntN(2)*(depth[k]/2))})
				case x < 15 && depth[k] > 0:
					if r.IntN(10) > 0 { // some exits are lost
						w.Write(&trace.Event{Time: at, PID: 7, TID: tid, Kind: trace.EventExit, Function: uint32(depth[k])})
					}
					depth[k]--
				case x < 17:
					var flags uint8
					if r.IntN(5) == 0 {
						flags = trace.SampleTruncated
					}
					w.Write(&trace.Sample{Time: at, PID: 7, TID: tid, Period: 1_000_000, Stack: uint32(r.IntN(5)), Flags: flags})
				case x < 19:
					out := r.IntN(2) == 0
					w.Write(&trace.Switch{Time: at, PID: 7, TID: tid, Out: out, Preempt: out && r.IntN(2) == 0})
				default:
					w.Write(&trace.GoID{Time: at, PID: 7, TID: tid, GoID: uint64(1 + r.IntN(3))})
				}
			}
		}
	}
	w.Close(slices.Max(now) + 10)
}

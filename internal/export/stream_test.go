package export

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// TestStreamEqualsLoaded: the exports of every trace fixture, and of
// instrumented and Go traces, read as a stream (the trees, or the
// samples, from one pass over the records) are the loaded trace's, byte
// for byte, with and without a thread filter, for every folded value; a
// label filter is refused with model.ErrNotStreamable.
func TestStreamEqualsLoaded(t *testing.T) {
	files, _ := filepath.Glob("../trace/testdata/*.trace")
	if len(files) == 0 {
		t.Fatal("no trace fixtures")
	}
	dir := t.TempDir()
	for _, events := range []bool{true, false} {
		path := filepath.Join(dir, fmt.Sprintf("go-events=%v.trace", events))
		writeGoTrace(t, path, events)
		files = append(files, path)
	}
	var calls bytes.Buffer
	if err := modeltest.WriteCalls(&calls, 50); err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(dir, "calls.trace"))
	if err := os.WriteFile(files[len(files)-1], calls.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	type exporter struct {
		name   string
		loaded func(*bytes.Buffer, *model.Profile, model.Filter) error
		stream func(*bytes.Buffer, *model.Stream, model.Filter) error
	}
	exporters := []exporter{
		{"pprof", func(b *bytes.Buffer, p *model.Profile, f model.Filter) error { return PPROF(b, p, f) },
			func(b *bytes.Buffer, s *model.Stream, f model.Filter) error { return PPROFStream(b, s, f) }},
	}
	for _, value := range []string{"", "samples", "cpu", "calls", "wall_raw", "cpu-clock"} {
		exporters = append(exporters, exporter{"folded " + value,
			func(b *bytes.Buffer, p *model.Profile, f model.Filter) error { return Folded(b, p, f, value) },
			func(b *bytes.Buffer, s *model.Stream, f model.Filter) error { return FoldedStream(b, s, f, value) }})
	}
	compared, perFile := 0, map[string]int{}
	for _, path := range files {
		for _, f := range []model.Filter{{}, {Thread: "*"}, {TID: 1, HasTID: true}} {
			for _, x := range exporters {
				p, s := modeltest.OpenBoth(t, path)
				var lb, sb bytes.Buffer
				lerr := x.loaded(&lb, p, f)
				err := x.stream(&sb, s, f)
				if errors.Is(err, model.ErrNotStreamable) {
					continue
				}
				if errors.Is(lerr, ErrUnknownValue) && errors.Is(err, ErrUnknownValue) && sb.Len() == 0 {
					continue // not a value of this recording, refused alike
				}
				if lerr != nil || err != nil {
					t.Fatalf("%s %s %+v: loaded %v, streamed %v", filepath.Base(path), x.name, f, lerr, err)
				}
				compared++
				perFile[filepath.Base(path)]++
				if !bytes.Equal(lb.Bytes(), sb.Bytes()) {
					t.Errorf("%s %s %+v: the streamed export differs (%d and %d bytes)", filepath.Base(path), x.name, f, lb.Len(), sb.Len())
				}
			}
		}
	}
	if compared == 0 {
		t.Error("no export streamed")
	}
	for _, name := range []string{"go-events=true.trace", "go-events=false.trace", "calls.trace"} {
		if perFile[name] == 0 {
			t.Errorf("%s: no export streamed", name)
		}
	}
	_, s := modeltest.OpenBoth(t, files[0])
	var b bytes.Buffer
	if err := PPROFStream(&b, s, model.Filter{Labels: []string{"k=v"}}); !errors.Is(err, model.ErrNotStreamable) || b.Len() > 0 {
		t.Errorf("a label filter: %v after %d bytes, want model.ErrNotStreamable before any", err, b.Len())
	}
}

// writeGoTrace writes to path the recording of a Go program: two
// threads running goroutines 1 to 3, samples, context switches and, with
// events, the entries and exits of main, mid and leaf. Each thread's
// records are written in blocks, the later thread's first, as the rings
// write them, and a goroutine switch sometimes follows a sample of the
// same time in the file, which every analysis applies first.
func writeGoTrace(t *testing.T, path string, events bool) {
	t.Helper()
	w := modeltest.NewTraceFile(t, path, &trace.Header{Event: "cpu-clock", Freq: 1000, Instrument: "uprobe"}, "main", "mid", "leaf")
	for _, n := range []trace.StackNode{{ID: 1, Location: 1}, {ID: 2, Parent: 1, Location: 2}, {ID: 3, Parent: 2, Location: 3}} {
		w.Write(&n)
	}
	w.Write(&trace.Comm{Time: 1000, PID: 7, TID: 7, Name: w.Intern("server"), Exec: true})
	w.Write(&trace.Fork{Time: 1001, PID: 7, PPID: 7, TID: 8, PTID: 7})
	now := [2]uint64{2000, 2003}
	depth := [2]uint32{}
	for block := range 6 {
		for k := 1; k >= 0; k-- {
			tid := uint32(7 + k)
			for i := range 12 {
				now[k] += uint64(5 + (block*7+i*3+k)%11)
				at := now[k]
				switch (block + i + k) % 6 {
				case 0:
					w.Write(&trace.Sample{Time: at, PID: 7, TID: tid, Period: 1_000_000, Stack: depth[k]})
					w.Write(&trace.GoID{Time: at, PID: 7, TID: tid, GoID: uint64(1 + (block+k)%3)})
				case 1, 2:
					if events && depth[k] < 3 {
						depth[k]++
						w.Write(&trace.Event{Time: at, PID: 7, TID: tid, Kind: trace.EventEntry, Function: depth[k]})
					}
				case 3:
					if events && depth[k] > 0 {
						w.Write(&trace.Event{Time: at, PID: 7, TID: tid, Kind: trace.EventExit, Function: depth[k]})
						depth[k]--
					}
				case 4:
					w.Write(&trace.Sample{Time: at, PID: 7, TID: tid, Period: 1_000_000, Stack: depth[k]})
				default:
					w.Write(&trace.Switch{Time: at, PID: 7, TID: tid, Out: i%2 == 0})
				}
			}
		}
	}
	w.Close(max(now[0], now[1]) + 10)
}

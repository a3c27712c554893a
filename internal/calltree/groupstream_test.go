package calltree

import (
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// TestGroupStreamSamples: GroupStreamSamples over a trace file groups its
// samples as GroupSamples does on the loaded trace, by thread and by
// goroutine, under thread filters, on the trace fixtures and on a Go
// trace whose goroutine switches follow, in the file, samples of the
// same time (which they precede in the analysis).
func TestGroupStreamSamples(t *testing.T) {
	files, _ := filepath.Glob("../trace/testdata/*.trace")
	goTrace := filepath.Join(t.TempDir(), "go.trace")
	w := modeltest.NewTraceFile(t, goTrace, &trace.Header{Event: "cpu-clock", Freq: 1000}, "main", "work")
	w.Write(&trace.StackNode{ID: 1, Location: 1}, &trace.StackNode{ID: 2, Parent: 1, Location: 2})
	w.Write(&trace.Comm{Time: 1000, PID: 7, TID: 7, Name: w.Intern("server"), Exec: true})
	for i := range 40 {
		at := 2000 + uint64(i)*10
		w.Write(&trace.Sample{Time: at, PID: 7, TID: 7, Period: 1000, Stack: uint32(1 + i%2)})
		if i%3 == 0 {
			w.Write(&trace.GoID{Time: at, PID: 7, TID: 7, GoID: uint64(1 + i%4)})
		}
	}
	w.Close(3000)
	files = append(files, goTrace)
	compared := 0
	for _, path := range files {
		for _, f := range []model.Filter{{}, {TID: 7, HasTID: true}, {Thread: "*"}} {
			for _, byGoroutine := range []bool{false, true} {
				p, s := modeltest.OpenBoth(t, path)
				got, err := GroupStreamSamples(s, f, byGoroutine)
				if errors.Is(err, model.ErrNotStreamable) {
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				want := GroupSamples(p, f, byGoroutine)
				got.Profile, want.Profile = nil, nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s %+v by goroutine %v: GroupStreamSamples\n%+v\nGroupSamples\n%+v", filepath.Base(path), f, byGoroutine, got, want)
				}
				compared++
				if path == goTrace && byGoroutine && len(want.Stacks) < 4 {
					t.Errorf("the Go trace grouped by goroutine: %d stacks", len(want.Stacks))
				}
			}
		}
	}
	if compared == 0 {
		t.Error("nothing streamed")
	}
	_, s := modeltest.OpenBoth(t, goTrace)
	if _, err := GroupStreamSamples(s, model.Filter{Labels: []string{"k=v"}}, true); !errors.Is(err, model.ErrNotStreamable) {
		t.Errorf("a label filter: %v, want ErrNotStreamable", err)
	}
}

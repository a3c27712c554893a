package model_test

import (
	"path/filepath"
	"testing"

	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// TestHasCalls holds Profile.HasCalls to what each kind of recording
// holds, loaded and streamed alike: a stream's Profile holds no events
// but says that its trace has them, and an aggregated recording has
// calls without any Event record.
func TestHasCalls(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rs ...trace.Record) string {
		path := filepath.Join(dir, name)
		w := modeltest.NewTraceFile(t, path, &trace.Header{}, "main")
		w.Write(&trace.StackNode{ID: 1, Location: 1})
		w.Write(rs...)
		w.Close(100)
		return path
	}
	for _, tc := range []struct {
		name  string
		path  string
		calls bool
	}{
		{"sampling", write("samples.trace", &trace.Sample{Time: 10, PID: 1, TID: 1, Period: 1, Stack: 1}), false},
		{"events", write("events.trace",
			&trace.Event{Time: 10, PID: 1, TID: 1, Kind: trace.EventEntry, Function: 1},
			&trace.Event{Time: 20, PID: 1, TID: 1, Kind: trace.EventExit, Function: 1}), true},
		// record --aggregate: see ../export/testdata's.
		{"aggregated", "../export/testdata/aggregated.trace", true},
	} {
		p, s := modeltest.OpenBoth(t, tc.path)
		if p.HasCalls() != tc.calls || s.Profile.HasCalls() != tc.calls {
			t.Errorf("%s: HasCalls loaded %v, streamed %v; want %v", tc.name, p.HasCalls(), s.Profile.HasCalls(), tc.calls)
		}
		if len(s.Profile.Events) != 0 {
			t.Errorf("%s: the stream's Profile holds %d events", tc.name, len(s.Profile.Events))
		}
	}
}

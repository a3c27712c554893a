package modeltest_test

import (
	"bytes"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// TestWriteCalls reads back the calls trace: 6n+2 events of one thread,
// well nested, of main, mid and leaf, and an end record after them.
func TestWriteCalls(t *testing.T) {
	var b bytes.Buffer
	if err := modeltest.WriteCalls(&b, 1000); err != nil {
		t.Fatal(err)
	}
	p, err := model.Load(&b)
	if err != nil || p.Err != nil {
		t.Fatal(err, p.Err)
	}
	if len(p.Events) != 6002 || p.End == nil || p.End.Time <= p.Events[len(p.Events)-1].Time {
		t.Fatalf("%d events, end %+v", len(p.Events), p.End)
	}
	depth, calls := 0, map[string]int{}
	for _, e := range p.Events {
		if e.Entry {
			depth++
			calls[p.Locations[e.Function].Symbol()]++
		} else {
			depth--
		}
		if depth < 0 || depth > 3 {
			t.Fatalf("depth %d at %d", depth, e.Time)
		}
	}
	if depth != 0 || calls["main"] != 1 || calls["mid"] != 1000 || calls["leaf"] != 2000 {
		t.Errorf("depth %d at the end, calls %v", depth, calls)
	}
}

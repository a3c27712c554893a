package calltree

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"trueprof/internal/model"
)

// readFlows returns r's callflows with their lines read back, and r
// without them.
func readFlows(t *testing.T, r *Result) ([]FlowThread, [][]FlowEvent, Result) {
	t.Helper()
	var threads []FlowThread
	var lines [][]FlowEvent
	for _, ft := range r.Flows {
		evs := flowEvents(t, &ft)
		ft.log, ft.t = nil, nil
		threads, lines = append(threads, ft), append(lines, evs)
	}
	rest := *r
	rest.Flows = nil
	return threads, lines, rest
}

// flowEvents returns ft's lines.
func flowEvents(t *testing.T, ft *FlowThread) []FlowEvent {
	t.Helper()
	var evs []FlowEvent
	if err := ft.Each(func(e *FlowEvent) error {
		evs = append(evs, *e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// sameResult reports whether got and want are equal, their callflows
// compared by their lines.
func sameResult(t *testing.T, got, want *Result) bool {
	t.Helper()
	gt, gl, gr := readFlows(t, got)
	wt, wl, wr := readFlows(t, want)
	return reflect.DeepEqual(gr, wr) && reflect.DeepEqual(gt, wt) && reflect.DeepEqual(gl, wl)
}

// TestFlowStoreKeepsLines: lines of three threads, interleaved, read back
// as they were added, from memory and from the spill file, whatever
// their values: times going back, the thread's root, negative and
// special floats, counts of every size.
func TestFlowStoreKeepsLines(t *testing.T) {
	tab := &Table{funcs: []Func{Unknown, {Name: "f", Module: "/m"}, {Name: "g"}}}
	s := &flowStore{limit: 3 * flowChunk}
	logs := make([]flowLog, 3)
	want := make([][]FlowEvent, len(logs))
	r := rand.New(rand.NewPCG(1, 2))
	tm := make([]uint64, len(logs))
	floats := []float64{0, math.Copysign(0, -1), 1.5, -3, math.Inf(1), math.NaN(), 1e300}
	for range 40000 {
		i := r.IntN(len(logs))
		tm[i] += r.Uint64N(1000)
		if r.IntN(50) == 0 {
			tm[i] -= min(tm[i], 5)
		}
		fn := FuncID(r.IntN(4) - 1)
		var d *Metrics
		if r.IntN(3) > 0 {
			d = &Metrics{}
			for _, p := range d.fields() {
				if r.IntN(2) == 0 {
					continue
				}
				if p.f != nil {
					*p.f = floats[r.IntN(len(floats))]
				} else {
					*p.u = r.Uint64() >> r.IntN(64)
				}
			}
		}
		kind, level := flowKinds[r.IntN(len(flowKinds))], r.IntN(300)-1
		logs[i].add(s, tm[i], kind, level, fn, d)
		e := FlowEvent{TimeNS: tm[i], Kind: kind, Level: level}
		if d != nil {
			e.Delta = *d
		}
		e.Name, e.Module = "root", ""
		if fn >= 0 {
			f := tab.Func(fn)
			e.Name, e.Module = f.Name, f.Module
		}
		want[i] = append(want[i], e)
	}
	for i := range logs {
		logs[i].finish()
		ft := FlowThread{Lines: logs[i].lines, FirstNS: logs[i].first, log: &logs[i], t: tab, root: "root"}
		got := flowEvents(t, &ft)
		if ft.Lines != len(want[i]) || ft.FirstNS != want[i][0].TimeNS || len(got) != len(want[i]) {
			t.Fatalf("thread %d: %d lines from %d, %d read back, want %d from %d", i, ft.Lines, ft.FirstNS, len(got), len(want[i]), want[i][0].TimeNS)
		}
		for j := range got {
			// NaN != NaN: compare the bits.
			if fmt.Sprintf("%#v", got[j]) != fmt.Sprintf("%#v", want[i][j]) {
				t.Fatalf("thread %d line %d: %#v, want %#v", i, j, got[j], want[i][j])
			}
		}
	}
	if s.file == nil || s.size < 10*flowChunk || s.mem > s.limit || s.err != nil {
		t.Errorf("store: file %v, %d bytes in it, %d in memory (limit %d), error %v", s.file, s.size, s.mem, s.limit, s.err)
	}
	stop := errors.New("stop")
	ft := FlowThread{log: &logs[0], t: tab}
	n := 0
	if err := ft.Each(func(*FlowEvent) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("Each returned %v after %d lines, want fn's error after 1", err, n)
	}
	if err := (&Result{lines: s}).Close(); err != nil || s.file != nil {
		t.Errorf("Close: %v, file %v", err, s.file)
	}
}

// TestFlowStoreWithoutFile: a store that cannot create its file keeps
// the lines in memory, and the replay's warnings say so.
func TestFlowStoreWithoutFile(t *testing.T) {
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	s := &flowStore{limit: flowChunk}
	var l flowLog
	for i := range 20000 {
		l.add(s, uint64(i), FlowEntry, 0, -1, nil)
	}
	l.finish()
	ft := FlowThread{Lines: l.lines, log: &l, t: &Table{}, root: "root"}
	if got := len(flowEvents(t, &ft)); got != 20000 || s.err == nil || s.file != nil {
		t.Errorf("%d lines read back, store error %v, file %v", got, s.err, s.file)
	}
	a := &replay{p: &model.Profile{}, cpu: true, lines: s}
	if w := a.warnings(&Result{}); len(w) != 1 || !strings.Contains(w[0], "stayed in memory") {
		t.Errorf("warnings %q, want the store's", w)
	}
}

// TestMetricFieldsAreAll: the store keeps every field of Metrics, so a
// field added to Metrics must be added to fields too.
func TestMetricFieldsAreAll(t *testing.T) {
	var m Metrics
	v := reflect.ValueOf(&m).Elem()
	want := map[uintptr]bool{}
	for i := range v.NumField() {
		want[v.Field(i).Addr().Pointer()] = true
	}
	for _, p := range m.fields() {
		var addr uintptr
		if p.f != nil {
			addr = reflect.ValueOf(p.f).Pointer()
		} else {
			addr = reflect.ValueOf(p.u).Pointer()
		}
		if !want[addr] {
			t.Errorf("fields has a pointer to no field of Metrics, or one twice")
		}
		delete(want, addr)
	}
	if len(want) > 0 {
		t.Errorf("fields leaves out %d fields of Metrics", len(want))
	}
}

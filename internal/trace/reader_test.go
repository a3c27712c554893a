package trace

import (
	"bytes"
	"io"
	"reflect"
	"testing"
)

// TestScanEqualsNext reads samples, events and the other per-event
// records with Scan and with Next: the same records, field for field,
// although Scan hands out one of each kind again and again.
func TestScanEqualsNext(t *testing.T) {
	rs := append(eventStream(2500), recorderStream(5000)...)
	rs = append(rs, &Switch{Time: 9e9, PID: 7, TID: 7, CPU: 2, Out: true, Preempt: true}, &Switch{Time: 9e9, PID: 7, TID: 8, CPU: 1}, &Adjust{Time: 9e9, PID: 7, TID: 7, Duration: 5, Dropped: 2}, &IRQ{Time: 9e9, PID: 7, TID: 8, CPU: 1, Vector: 3, Duration: 9},
		&GoID{Time: 9e9 + 1, PID: 7, TID: 7, GoID: 4}, &Adjust{Time: 9e9 + 2, PID: 7, TID: 8, Duration: 1})
	data := writeTrace(t, Options{}, rs)
	next, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	scan, _ := NewReader(bytes.NewReader(data))
	n := 0
	for same(t, n, "Scan", scan.Scan, next.Next) != nil {
		n++
	}
	if n < len(rs) {
		t.Errorf("read %d records of %d", n, len(rs))
	}
}

// TestSkimEvents reads an instrumented trace twice: with Scan alone, and
// with Scan and SkimEvents after each event. The skimmed events are
// those Scan returns, up to the first of another thread, of a function
// at or past maxFunc (or 0), or later than until, and span folds their
// times as Add does; every other record is Scan's, in the same order.
func TestSkimEvents(t *testing.T) {
	rs := eventStream(3000)
	// Another thread, a function the skim must refuse, and times that
	// go back.
	for i := range 400 {
		tid := uint32(7 + i%3/2)
		rs = append(rs, &Event{Time: uint64(200000 + 10*i - 25*(i%4)), PID: 7, TID: tid, Kind: EventKind(1 + i%2), Function: uint32(1 + i%9%2)})
	}
	rs = append(rs, &Location{ID: 2, Address: 0x2000, Module: 1, Offset: 0x2000}, &Event{Time: 300000, PID: 7, TID: 7, Kind: EventEntry, Function: 1})
	data := writeTrace(t, Options{ChunkSize: 4096}, rs)
	for _, tc := range []struct {
		name           string
		maxFunc        uint32
		until          uint64
		wantSkimAtMost int
	}{
		{"all", 3, ^uint64(0), -1},
		{"function 1 only", 2, ^uint64(0), -1},
		{"no function", 1, ^uint64(0), 0},
		{"until", 3, 100000, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scan, err := NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			skim, _ := NewReader(bytes.NewReader(data))
			var got, want TimeSpan
			skimmed := 0
			for n := 0; ; n++ {
				w := same(t, n, "after skimming", skim.Scan, scan.Scan)
				if w == nil {
					break
				}
				e, ok := w.(*Event)
				if !ok {
					continue
				}
				k := skim.SkimEvents(tc.maxFunc, tc.until, &got)
				skimmed += k
				for range k {
					w, err := scan.Scan()
					if err != nil {
						t.Fatal(err)
					}
					s, ok := w.(*Event)
					if !ok || s.PID != e.PID || s.TID != e.TID || s.Function == 0 || s.Function >= tc.maxFunc || s.Time > tc.until {
						t.Fatalf("skimmed %#v after %#v (maxFunc %d, until %d)", w, e, tc.maxFunc, tc.until)
					}
					want.Add(s.Time)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("span %+v, want %+v", got, want)
			}
			if tc.wantSkimAtMost >= 0 && skimmed > tc.wantSkimAtMost || tc.wantSkimAtMost < 0 && skimmed < 1000 {
				t.Errorf("skimmed %d events", skimmed)
			}
			t.Logf("skimmed %d events, span %+v", skimmed, got)
		})
	}
}

// same reads the next record with got and with want, and fails t unless
// both return the same record (returned), or io.EOF (nil returned): the
// n'th, got read as what says.
func same(t *testing.T, n int, what string, got, want func() (Record, error)) Record {
	t.Helper()
	w, werr := want()
	g, gerr := got()
	if werr != gerr {
		t.Fatalf("record %d: %v %s, %v", n, gerr, what, werr)
	}
	if werr == io.EOF {
		return nil
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("record %d: %#v %s, %#v", n, g, what, w)
	}
	return w
}

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
	for {
		want, werr := next.Next()
		got, gerr := scan.Scan()
		if werr != gerr {
			t.Fatalf("record %d: Scan %v, Next %v", n, gerr, werr)
		}
		if werr == io.EOF {
			break
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d: Scan %#v, Next %#v", n, got, want)
		}
		n++
	}
	if n < len(rs) {
		t.Errorf("read %d records of %d", n, len(rs))
	}
}

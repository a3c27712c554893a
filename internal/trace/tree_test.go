package trace

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

// TestTreeRecordsRoundTrip round-trips the records of an aggregated
// recording, the header's aggregate field, and hands every accepted
// record to Options.Observe.
func TestTreeRecordsRoundTrip(t *testing.T) {
	want := []Record{
		&TreeThread{Time: 5, Thread: 1, PID: 10, TID: 11, Start: 3, Name: 2, Begin: 3, End: 90, First: 4, Last: 80,
			Events: 1 << 40, Popped: 1, Unmatched: 2, Unclosed: 3, Detached: math.MaxUint64},
		&TreeThread{Time: 5, Thread: 2, PID: 10, TID: 11, Start: 3, Name: 2, ByGoroutine: true},
		&TreeThread{Time: 5, Thread: 3, PID: 10, Name: 2, Begin: 4, End: 90, ByGoroutine: true, Goroutine: true,
			GoID: 1 << 40, Ran: []uint32{11, math.MaxUint32}},
		&TreeNode{Time: 5, Thread: 1, ID: 0, Parent: 0, Base: TreeMetrics{WallNS: 1.5, WallNSRaw: 2}},
		&TreeNode{Time: 5, Thread: 1, ID: 7, Parent: 3, Location: math.MaxUint32, Frame: 2, Recursion: 4,
			Calls: 10_000_000, Closed: 9_999_999,
			Base: TreeMetrics{WallNS: 123.25, WallNSRaw: 200, DeltaNS: 76.75, CPUNS: 100.5, Dispatches: 3, Voluntary: 2,
				Involuntary: 1, Interrupts: 4, InterruptNS: 500, Samples: 6, Period: math.MaxUint64},
			MinSelfNS: 0.125, MaxSelfNS: 1e9, MinSelfCPUNS: 0.0625, MaxSelfCPUNS: 5e8},
		&TreeNode{Time: 6, Thread: 1, ID: 8, Parent: 2, Pruned: true},
		&TreeMark{Time: 6, Kind: TreeSnapshot, Dropped: 3, Switches: true, Nodes: 9, Pruned: 1, PrunedNS: 42.5},
		&TreeMark{Time: 7, Kind: TreeReset, Interrupts: true},
	}
	h := testHeader()
	h.Aggregate = &Aggregate{SnapshotNS: 1e9, TreeMemory: 64 << 20}
	var seen []Record
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h, Options{Observe: func(r Record) { seen = append(seen, r) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range want {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("observed %v, want %v", seen, want)
	}
	gotH, got, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotH.Aggregate, h.Aggregate) {
		t.Errorf("header aggregate %+v, want %+v", gotH.Aggregate, h.Aggregate)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

// TestTreeNodeNotFinite: a TreeNode whose metric is NaN or an infinity
// is corrupt, not read into the tree (FuzzLoad compares profiles, and a
// NaN is never equal to itself).
func TestTreeNodeNotFinite(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		var c chunkBuilder
		if err := c.add(&TreeNode{Time: 1, Thread: 1, ID: 1, Base: TreeMetrics{WallNS: 5}, MaxSelfNS: v}); err != nil {
			t.Fatal(err)
		}
		var d chunkDecoder
		d.reset(c.raw)
		if r, err := d.next(); err == nil {
			t.Errorf("a TreeNode with MaxSelfNS %v decoded without error: %+v", v, r)
		}
	}
}

// TestTreeNodeCutShort: a TreeNode body missing its last float is
// corrupt, not read as zeros.
func TestTreeNodeCutShort(t *testing.T) {
	var c chunkBuilder
	if err := c.add(&TreeNode{Time: 1, Thread: 1, ID: 1, MaxSelfNS: 5}); err != nil {
		t.Fatal(err)
	}
	raw := c.raw
	// Shorten the body by one byte: the length byte is raw[2].
	raw = append([]byte{raw[0], raw[1], raw[2] - 1}, raw[3:len(raw)-1]...)
	var d chunkDecoder
	d.reset(raw)
	if _, err := d.next(); err == nil {
		t.Error("a cut-short TreeNode decoded without error")
	}
}

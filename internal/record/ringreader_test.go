package record

import (
	"testing"

	"trueprof/internal/perf"
)

// TestRingReaderCountsHeldBuffers checks that the reader's bound counts
// the stack buffers the loop took and has not given back: they are still
// the recorder's memory, and a bound on the queue alone let twice the
// stated memory build up.
func TestRingReaderCountsHeldBuffers(t *testing.T) {
	const buf = 64 << 10
	rr := &ringReader{stackBytes: buf}
	n := queueLimit / buf
	for range n {
		rr.queue = append(rr.queue, perf.Record{UserStack: make([]byte, 0, buf)})
	}
	got, _, _ := rr.take(nil, nil)
	if len(got) != n {
		t.Fatalf("took %d records, want %d", len(got), n)
	}
	if rr.held != queueLimit {
		t.Fatalf("held = %d bytes after taking %d buffers of %d, want %d", rr.held, n, buf, queueLimit)
	}
	// The loop still holds them all: the reader must not read more.
	if rr.readLocked(); rr.fullPasses() != 1 {
		t.Fatal("reader read on while the loop held queueLimit bytes of its buffers")
	}
	// Giving half back makes room again.
	freed := make([][]byte, 0, n/2)
	for i := range n / 2 {
		freed = append(freed, got[i].UserStack)
	}
	rr.take(nil, freed)
	if want := int64(queueLimit - n/2*buf); rr.held != want {
		t.Fatalf("held = %d bytes after %d buffers came back, want %d", rr.held, n/2, want)
	}
	if rr.readLocked(); rr.fullPasses() != 0 {
		t.Fatal("reader stayed full after the loop gave half its buffers back")
	}
}

// TestKeepRest: the loop's buffers keep their records after a drain and
// give a burst's capacity back once it is over.
func TestKeepRest(t *testing.T) {
	buf := make([]int, 100, 1000)
	for i := range buf {
		buf[i] = i
	}
	got := keepRest(buf, 90, 16)
	if len(got) != 10 || got[0] != 90 || got[9] != 99 || cap(got) != 20 {
		t.Errorf("after a burst: len %d cap %d %v, want the last 10 records in a buffer of 20 (twice their number)", len(got), cap(got), got)
	}
	buf = make([]int, 100, 120)
	if got := keepRest(buf, 50, 16); len(got) != 50 || cap(got) != 120 {
		t.Errorf("no burst: len %d cap %d, want 50 records in the same buffer", len(got), cap(got))
	}
}

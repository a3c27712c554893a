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

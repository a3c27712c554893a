package record

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

// gcPercent returns the collector's setting.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestHoldCollector: a recording holds the collector back until its
// first cycle, then runs it at the recording's setting (the lowest of
// those recording at once), and the last to end restores the process's.
func TestHoldCollector(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	// A cycle still running would count as the first cycle of the hold.
	runtime.GC()
	release := holdCollector(-1)
	if p := gcPercent(); p != heldPercent {
		t.Fatalf("GOGC %d while held: want %d", p, heldPercent)
	}
	// The limit caps the goal that GOGC would put at 17 times a large
	// heap.
	if l := debug.SetMemoryLimit(-1); l < heldHeap || l == math.MaxInt64 {
		t.Errorf("memory limit %d while held: want at least %d, and a limit", l, heldHeap)
	}
	checkCollector()
	if p := gcPercent(); p != heldPercent {
		t.Fatalf("GOGC %d after a check without a cycle: want %d", p, heldPercent)
	}
	agg := holdCollector(aggregateGCPercent)
	runtime.GC()
	checkCollector()
	if p := gcPercent(); p != aggregateGCPercent {
		t.Errorf("GOGC %d after a cycle with an aggregated recording: want %d", p, aggregateGCPercent)
	}
	agg()
	if p := gcPercent(); p != aggregateGCPercent {
		t.Errorf("GOGC %d with one recording still running: want %d", p, aggregateGCPercent)
	}
	release()
	if p := gcPercent(); p != 100 {
		t.Errorf("GOGC %d after the recordings: want the process's 100", p)
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Errorf("memory limit %d after the recordings: want the process's (none)", l)
	}

	// Held again by the next recording, ended by its own cycle.
	release = holdCollector(-1)
	runtime.GC()
	checkCollector()
	if p := gcPercent(); p != 100 {
		t.Errorf("GOGC %d after a cycle: want the process's 100", p)
	}
	release()

	// A process with the collector off keeps it off.
	debug.SetGCPercent(-1)
	release = holdCollector(-1)
	if p := gcPercent(); p != -1 {
		t.Errorf("GOGC %d while held in a process without a collector: want -1", p)
	}
	release()
	if p := gcPercent(); p != -1 {
		t.Errorf("GOGC %d after the recording: want -1", p)
	}
}

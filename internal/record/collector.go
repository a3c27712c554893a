package record

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The Go collector during a recording. With the default GOGC its first
// cycle comes at 4 MiB of heap, and a recording's start and stop allocate
// that much in bursts (the target's symbols, the trace writer, the
// decoder's slabs, the BPF objects): a recording of a one-call program,
// 25 ms in all, ran two cycles, whose stops of the world and mark workers
// took a CPU the start needs on a small machine (the ring reader, the
// events being opened). With the collector held back until the heap
// reaches heldHeap, that command took 22.0 ms instead of 26.8 (medians of
// 25 interleaved runs, 2 CPUs). A recording that allocates more has its
// first cycle there, and from then on the collector runs at the
// recording's setting: a long recording's memory stays what it was.

// heldPercent is the GOGC of a recording until the collector's first
// cycle: the runtime scales its minimum heap of 4 MiB by GOGC/100, so
// the first cycle of a fresh process (trueprof record) comes at
// heldHeap. A process that already holds more (a test binary, a library
// user) would have its goal at 17 times what it holds: a memory limit
// (heldLimit) caps it at twice that.
const heldPercent = 1600

// heldHeap is where the collector's first cycle comes in a fresh
// process while held.
const heldHeap = 64 << 20

// collector is the process's collector setting, shared by the recordings
// running at once (tests, library users): the first to start holds the
// collector back, the last to end restores what was set before.
var collector struct {
	mu      sync.Mutex
	holders int
	before  int    // the setting before the first holder
	limit   int64  // the memory limit before the first holder
	after   int    // the setting after the first cycle: the lowest asked since the first holder
	cycles  uint64 // the collector's cycles when the first holder started
	held    bool   // heldPercent and heldLimit are in force
}

// gcCycles is the runtime metric counting the collector's cycles.
var gcCycles = []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}

// heldLimit returns the memory limit while held: twice the memory the
// runtime holds now, at least heldHeap, at most limit (the process's).
func heldLimit(limit int64) int64 {
	m := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(m)
	inUse := int64(m[0].Value.Uint64() - m[1].Value.Uint64())
	return min(limit, max(heldHeap, 2*inUse))
}

// holdCollector holds the collector back for a recording until its first
// cycle, after which it runs at percent (a negative percent: the setting
// the process had), and returns what ends the hold. A process whose
// collector is off, or set looser than heldPercent, is not held: it keeps
// its setting, but for an aggregated recording's, which is lower.
func holdCollector(percent int) (release func()) {
	c := &collector
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holders == 0 {
		c.before = debug.SetGCPercent(heldPercent)
		c.limit = debug.SetMemoryLimit(-1)
		c.after = c.before
		c.held = c.before >= 0 && c.before < heldPercent
		if c.held {
			debug.SetMemoryLimit(heldLimit(c.limit))
		} else {
			debug.SetGCPercent(c.before)
		}
		metrics.Read(gcCycles)
		c.cycles = gcCycles[0].Value.Uint64()
	}
	c.holders++
	if percent >= 0 && (c.after < 0 || percent < c.after) {
		c.after = percent
		if !c.held {
			debug.SetGCPercent(percent)
		}
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.holders--; c.holders == 0 {
			debug.SetGCPercent(c.before)
			debug.SetMemoryLimit(c.limit)
			c.held = false
		}
	}
}

// checkCollector ends the hold once the collector has run a cycle: the
// heap reached what heldPercent allows, and from then on a recording's
// memory is bounded as the recording's setting bounds it.
func checkCollector() {
	c := &collector
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		return
	}
	metrics.Read(gcCycles)
	if gcCycles[0].Value.Uint64() == c.cycles {
		return
	}
	debug.SetGCPercent(c.after)
	debug.SetMemoryLimit(c.limit)
	c.held = false
}

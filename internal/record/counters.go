package record

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"syscall"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// Per-thread counters (page faults, CPU migrations) come from events
// opened like the sampling event, one per thread and CPU and inherited,
// that write a sample for every fault and every migration
// (perf.CounterAttr): a thread's count is the number of its samples, so
// it is exact and its own, alive or not. They go to one ring per CPU,
// read by a goroutine of their own (siderings.go), and are counted as
// soon as they are read, ahead of the records merged by time: a thread's
// samples all precede its exit record, and the loop reads the counter
// rings after the sampling rings, so they are all counted by the time
// its exit is processed, which writes its Counter records. Threads still
// running when recording ends get theirs then.

// counterKinds are the counters recorded, in the order of counts' arrays.
// Migrations happen in the kernel, so they are counted only where kernel
// events may be; user-space page faults are counted anyway.
var counterKinds = [...]struct {
	event      string
	kind       trace.CounterKind
	kernelOnly bool
}{
	{"page-faults", trace.CounterPageFaults, false},
	{"cpu-migrations", trace.CounterMigrations, true},
}

type counts [len(counterKinds)]uint64

// counterState is the per-thread counting of a session.
type counterState struct {
	on     bool                    // events open
	off    bool                    // gave up after a warning
	opened [len(counterKinds)]bool // the kinds counted
	kinds  map[uint64]int          // index in counterKinds by event id
	// owners are the events whose rings the others share, by CPU.
	owners map[int]int
	rings  []*perf.Ring
	// counts are by pid and tid; s.side.mu guards them.
	counts map[[2]uint32]*counts
	rec    trace.Counter // reused by writeCounts
}

// openCounters opens the counters of thread tid on cpu. A failure other
// than the thread having ended is reported once and the session goes on
// without counters.
func (s *session) openCounters(tid, cpu int, kernel, launched bool) {
	c := &s.counters
	if c.off {
		return
	}
	if c.kinds == nil {
		c.kinds, c.owners, c.counts = map[uint64]int{}, map[int]int{}, map[[2]uint32]*counts{}
	}
	for kind, k := range counterKinds {
		if k.kernelOnly && !kernel {
			continue
		}
		err := s.openCounter(tid, cpu, kind, k.event, kernel, launched)
		if !launched && errors.Is(err, syscall.ESRCH) {
			return // the thread ended meanwhile
		}
		if err != nil {
			c.off, c.on = true, false
			fmt.Fprintf(s.log, "trueprof: per-thread counters not recorded: %v\n", err)
			return
		}
	}
	c.on = true
}

func (s *session) openCounter(tid, cpu, kind int, name string, kernel, launched bool) error {
	c := &s.counters
	ev, err := perf.ParseEvent(name)
	if err != nil {
		return err
	}
	o := perf.CounterOptions{Kernel: kernel, EnableOnExec: launched, Watermark: s.watermark()}
	owner, ok := c.owners[cpu]
	if !ok {
		owner = -1
	}
	e, err := s.openShared(perf.CounterAttr(ev, o), tid, cpu, owner)
	if err != nil {
		return err
	}
	if e.ring != nil {
		c.owners[cpu] = e.fd
		c.rings = append(c.rings, e.ring)
	}
	// The poll loop waits on the rings too, and closeEvents closes all.
	s.events = append(s.events, e)
	id, err := perf.EventID(e.fd)
	if err != nil {
		return err
	}
	c.kinds[id] = kind
	c.opened[kind] = true
	return nil
}

// readCounters counts the samples of the counter rings. The caller holds
// s.side.mu.
func (s *session) readCounters() {
	c := &s.counters
	for _, ring := range c.rings {
		ring.Read(func(rec []byte) {
			var r perf.Record
			if err := perf.Decode(rec, perf.CounterSampleType, &r); err != nil {
				s.side.unparsed++
				return
			}
			switch r.Type {
			case perf.RecordSample:
				kind, ok := c.kinds[r.ID]
				if !ok {
					return
				}
				k := [2]uint32{r.PID, r.TID}
				n := c.counts[k]
				if n == nil {
					n = &counts{}
					c.counts[k] = n
				}
				n[kind]++
			case perf.RecordLost:
				s.side.lost += r.Lost
			}
		})
	}
}

// trackCounters writes a thread's Counter records at its exit.
func (s *session) trackCounters(r *perf.Record) error {
	if !s.counters.on || r.Type != perf.RecordExit {
		return nil
	}
	return s.writeCounts(r.Time, r.PID, r.TID)
}

// finishCounters writes the Counter records of the threads still running
// once the last records are processed.
func (s *session) finishCounters() error {
	c := &s.counters
	if !c.on {
		return nil
	}
	now := perf.Now()
	threads := map[[2]uint32]bool{}
	s.side.mu.Lock()
	for k := range c.counts {
		threads[k] = true
	}
	s.side.mu.Unlock()
	for tid, th := range s.threads.live {
		if th.execed {
			threads[[2]uint32{th.pid, tid}] = true
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(threads), func(a, b [2]uint32) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	}) {
		if err := s.writeCounts(now, k[0], k[1]); err != nil {
			return err
		}
	}
	return nil
}

// writeCounts writes the Counter records of a thread and forgets its
// counts.
func (s *session) writeCounts(time uint64, pid, tid uint32) error {
	c := &s.counters
	k := [2]uint32{pid, tid}
	var n counts
	s.side.mu.Lock()
	if p := c.counts[k]; p != nil {
		n = *p
		delete(c.counts, k)
	}
	s.side.mu.Unlock()
	for i, ck := range counterKinds {
		if !c.opened[i] {
			continue
		}
		c.rec = trace.Counter{Time: time, PID: pid, TID: tid, Kind: ck.kind, Value: n[i]}
		if err := s.w.Write(&c.rec); err != nil {
			return err
		}
	}
	return nil
}

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
// that overflow at every fault and every migration (perf.CounterAttr).
//
// Where BPF is permitted, a program attached to them (perf.ThreadCounts)
// counts each occurrence in a map entry of the thread incarnation it
// happened in, and no record is written: a thread costs one map entry,
// however many faults it takes. A thread's entry is read and deleted
// when its exit record is processed (its count is final by then: the
// kernel detaches a thread's events before it writes the exit record),
// and those of threads still running when recording ends then.
//
// Otherwise (the fallback) every occurrence writes a sample to one ring
// per CPU, read by a goroutine of their own (siderings.go), and a
// thread's count is the number of its samples, counted as soon as they
// are read, ahead of the records merged by time: a thread's samples all
// precede its exit record, and the loop reads the counter rings after
// the sampling rings, so they are all counted by the time its exit is
// processed, which writes its Counter records.

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

// countInKernel chooses BPF counting when it is permitted; tests turn it
// off to check the fallback.
var countInKernel = true

// counterState is the per-thread counting of a session.
type counterState struct {
	on     bool                    // events open
	off    bool                    // gave up after a warning
	opened [len(counterKinds)]bool // the kinds counted

	// tc counts in the kernel; nil before the first event is opened and
	// in the fallback.
	tc    *perf.ThreadCounts
	tried bool // tc was tried
	// entries are tc's entries by tid, read at entriesTime.
	entries     map[uint32][]threadCount
	entriesTime uint64
	dropped     uint64 // tc's drops already counted as lost

	// The fallback's events, by id, the events whose rings the others
	// share, by CPU, and the rings.
	kinds  map[uint64]int
	owners map[int]int
	rings  []*perf.Ring
	// counts are by pid and tid; s.side.mu guards them.
	counts map[[2]uint32]*counts
	rec    trace.Counter // reused by writeCounts
}

// threadCount is an entry of ThreadCounts.
type threadCount struct {
	key perf.ThreadKey
	n   counts
}

// openCounters opens the counters of thread tid on cpu. A failure other
// than the thread having ended is reported once and the session goes on
// without counters.
func (s *session) openCounters(tid, cpu int, kernel, launched bool) {
	c := &s.counters
	if c.off {
		return
	}
	if !c.tried {
		c.tried = true
		c.kinds, c.owners, c.counts = map[uint64]int{}, map[int]int{}, map[[2]uint32]*counts{}
		if countInKernel {
			var err error
			if c.tc, err = perf.NewThreadCounts(len(counterKinds)); err != nil {
				fmt.Fprintf(s.log, "trueprof: per-thread counters write a ring record per page fault and migration: %v\n", err)
			}
		}
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
	if c.tc != nil {
		fd, err := perf.Open(perf.CounterAttr(ev, o), tid, cpu, 0)
		if err != nil {
			return err
		}
		if err := c.tc.Attach(fd, kind); err != nil {
			perf.Close(fd)
			return err
		}
		s.events = append(s.events, event{fd: fd})
		c.opened[kind] = true
		return nil
	}
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

// close releases the in-kernel counts, once the events are closed.
func (c *counterState) close() {
	if c.tc != nil {
		c.tc.Close()
		c.tc = nil
	}
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
	if c.tc != nil {
		if err := s.readEntries(now); err != nil {
			return err
		}
		for _, es := range c.entries {
			for _, e := range es {
				threads[[2]uint32{e.key.PID, e.key.TID}] = true
			}
		}
	}
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

// readEntries reads the in-kernel counts of every thread at time now,
// and counts as lost the events they had no room for.
func (s *session) readEntries(now uint64) error {
	c := &s.counters
	all, err := c.tc.Counts()
	if err != nil {
		return err
	}
	clear(c.entries)
	if c.entries == nil {
		c.entries = map[uint32][]threadCount{}
	}
	for k, v := range all {
		e := threadCount{key: k}
		copy(e.n[:], v)
		c.entries[k.TID] = append(c.entries[k.TID], e)
	}
	c.entriesTime = now
	dropped, err := c.tc.Dropped()
	if err != nil {
		return err
	}
	if dropped > c.dropped {
		fmt.Fprintf(s.log, "trueprof: %d page faults or migrations not counted: more than %d threads at once\n", dropped-c.dropped, perf.ThreadCountsEntries)
		s.lost(trace.LostKernel, dropped-c.dropped, now)
		c.dropped = dropped
	}
	return nil
}

// takeEntry returns and deletes the in-kernel counts of the incarnation
// of pid/tid alive at time: the latest to start by then. A later one is
// a new thread with the id, whose entry stays.
func (s *session) takeEntry(time uint64, pid, tid uint32) (counts, error) {
	c := &s.counters
	if time >= c.entriesTime {
		// Entries read after the thread's exit hold its final counts.
		if err := s.readEntries(perf.Now()); err != nil {
			return counts{}, err
		}
	}
	es := c.entries[tid]
	best := -1
	for i, e := range es {
		if e.key.PID == pid && e.key.Start <= time && (best < 0 || e.key.Start > es[best].key.Start) {
			best = i
		}
	}
	if best < 0 {
		return counts{}, nil // no event in its life
	}
	e := es[best]
	c.entries[tid] = slices.Delete(es, best, best+1)
	return e.n, c.tc.Delete(e.key)
}

// writeCounts writes the Counter records of a thread and forgets its
// counts.
func (s *session) writeCounts(time uint64, pid, tid uint32) error {
	c := &s.counters
	k := [2]uint32{pid, tid}
	var n counts
	if c.tc != nil {
		var err error
		if n, err = s.takeEntry(time, pid, tid); err != nil {
			return err
		}
	} else {
		s.side.mu.Lock()
		if p := c.counts[k]; p != nil {
			n = *p
			delete(c.counts, k)
		}
		s.side.mu.Unlock()
	}
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

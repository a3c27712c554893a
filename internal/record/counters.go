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

// Per-thread counters (page faults, CPU migrations) are the counts the
// kernel keeps in every task_struct (min_flt + maj_flt,
// se.nr_migrations). Where BPF is permitted, perf.ThreadCounts follows
// the target's processes in the kernel (from fork, or from a launched
// target's exec) and keeps each of their threads' counts at its exit,
// which the loop takes when it processes the thread's exit record (the
// kernel takes them before it writes that record). Threads still running
// when recording ends are read from /proc. A thread's counts are since
// it was forked, or since its process's exec for a launched target's
// first thread, or since the events were enabled for the threads of an
// attached process (their counts then are their bases). Nothing runs per
// fault or migration.
//
// Otherwise (the fallback) events opened like the sampling event, one
// per thread and CPU and inherited, overflow at every fault and every
// migration (perf.CounterAttr) and write a sample each to one ring per
// CPU, read by a goroutine of their own (siderings.go), and a thread's
// count is the number of its samples, counted as soon as they are read,
// ahead of the records merged by time: a thread's samples all precede its
// exit record, and the loop reads the counter rings after the sampling
// rings, so they are all counted by the time its exit is processed,
// which writes its Counter records.

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
	on     bool                    // counting
	off    bool                    // gave up after a warning
	opened [len(counterKinds)]bool // the kinds counted

	// tc counts in the kernel; nil before the first thread is opened and
	// in the fallback.
	tc    *perf.ThreadCounts
	tried bool // tc was tried
	// exits are tc's exit counts by tid, read at exitsTime.
	exits     map[uint32][]exitCount
	exitsTime uint64
	// bases are the counts of threads before they were counted, by pid
	// and tid: at a launched target's exec, or when an attached
	// process's events were enabled.
	bases   map[[2]uint32]countBase
	dropped uint64 // tc's drops already counted as lost

	// The fallback's events, by id, the events whose rings the others
	// share, by CPU, and the rings.
	kinds  map[uint64]int
	owners map[int]int
	rings  []*perf.Ring
	// counts are by pid and tid; s.side.mu guards them.
	counts map[[2]uint32]*counts
	rec    trace.Counter // reused by writeCounts
}

// exitCount is a thread's counts at its exit.
type exitCount struct {
	key perf.ThreadKey
	n   perf.TaskCounts
}

// countBase is the base of the incarnation of a thread id that started
// by time before.
type countBase struct {
	before uint64
	n      perf.TaskCounts
}

// openCounters starts counting the threads of process pid in the kernel,
// or opens the fallback's events on thread tid and cpu. A failure other
// than the thread having ended is reported once and the session goes on
// without counters.
func (s *session) openCounters(pid, tid, cpu int, kernel, launched bool) {
	c := &s.counters
	if c.off {
		return
	}
	if !c.tried {
		c.tried = true
		c.kinds, c.owners, c.counts = map[uint64]int{}, map[int]int{}, map[[2]uint32]*counts{}
		c.bases = map[[2]uint32]countBase{}
		if countInKernel {
			var err error
			if c.tc, err = s.threadCounts(); err != nil {
				fmt.Fprintf(s.log, "trueprof: per-thread counters write a ring record per page fault and migration: %v\n", err)
			} else if err = s.trackCounts(pid, launched); err != nil {
				c.tc.Close()
				c.tc, c.off = nil, true
				fmt.Fprintf(s.log, "trueprof: per-thread counters not recorded: %v\n", err)
				return
			}
		}
	}
	if c.tc != nil {
		for kind := range counterKinds {
			c.opened[kind] = true
		}
		c.on = true
		return
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

// trackCounts starts the in-kernel counting of process pid; a launched
// target's from its next exec, once the wrapper's own exec is complete
// (target.running): that exec's tracepoint must not take the base.
func (s *session) trackCounts(pid int, launched bool) error {
	if launched {
		if err := s.tgt.running(); err != nil {
			return err
		}
	}
	return s.counters.tc.Track(pid, launched)
}

// threadCountsOpening is perf.NewThreadCounts running on a goroutine of
// its own (startThreadCounts) while the sampling rings are mapped: its
// BPF maps and programs took 5-8 ms of every start, one after the rings'
// 4 ms per CPU.
type threadCountsOpening struct {
	done chan struct{}
	tc   *perf.ThreadCounts
	err  error
}

// startThreadCounts starts loading the in-kernel counting, when it is
// chosen, for threadCounts to take.
func (s *session) startThreadCounts() {
	if !countInKernel {
		return
	}
	o := &threadCountsOpening{done: make(chan struct{})}
	s.tcOpening = o
	go func() {
		defer close(o.done)
		o.tc, o.err = perf.NewThreadCounts()
	}()
}

// threadCounts returns startThreadCounts' counting once loaded, or loads
// it now when none was started or it was taken already (the events
// opened again without kernel samples).
func (s *session) threadCounts() (*perf.ThreadCounts, error) {
	o := s.tcOpening
	if o == nil {
		return perf.NewThreadCounts()
	}
	s.tcOpening = nil
	<-o.done
	return o.tc, o.err
}

// dropThreadCounts releases startThreadCounts' counting when no thread
// took it (Run failed before).
func (s *session) dropThreadCounts() {
	if s.tcOpening == nil {
		return
	}
	if tc, err := s.threadCounts(); err == nil {
		tc.Close()
	}
}

// openCounter opens the fallback's event of kind on thread tid and cpu.
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
	e, err := s.openShared(perf.CounterAttr(ev, o), tid, cpu, owner, s.cfg.RingPages)
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

// baseCounters takes the bases of an attached process's threads once its
// events are enabled: their counts until then are not the recording's.
// Threads that exited before are forgotten.
func (s *session) baseCounters(pid int) error {
	c := &s.counters
	if c.tc == nil || !c.on {
		return nil
	}
	now := perf.Now()
	tids, err := threads(pid)
	if err != nil {
		return err
	}
	for _, tid := range tids {
		n, err := perf.ReadTaskCounts(pid, tid)
		if err != nil {
			continue // it ended meanwhile: its exit count is since its start
		}
		c.bases[[2]uint32{uint32(pid), uint32(tid)}] = countBase{before: now, n: n}
	}
	exits, err := c.tc.Exits()
	if err != nil {
		return err
	}
	for k := range exits {
		if k.Start <= now {
			if err := c.tc.Delete(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// close releases the in-kernel counting, once the events are closed.
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
	n, err := s.exitCounts(r.Time, r.PID, r.TID)
	if err != nil {
		return err
	}
	return s.writeCounts(r.Time, r.PID, r.TID, n)
}

// finishCounters writes the Counter records of the threads still running
// once the last records are processed, and of those whose exit record
// never came.
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
	// Live threads are read from /proc, after the bases at exec and
	// before the exit counts are read again: one that ends meanwhile has
	// its exit counts by the time its /proc entry is gone.
	live := map[[2]uint32]counts{}
	if c.tc != nil {
		if err := s.readExits(now); err != nil {
			return err
		}
		for k := range threads {
			if n, err := perf.ReadTaskCounts(int(k[0]), int(k[1])); err == nil {
				live[k] = toCounts(n.Sub(c.takeBase(k[0], k[1], 0)))
			}
		}
		if err := s.readExits(now); err != nil {
			return err
		}
		for _, es := range c.exits {
			for _, e := range es {
				threads[[2]uint32{e.key.PID, e.key.TID}] = true
			}
		}
	}
	for _, k := range sortedThreads(threads) {
		n, ok := live[k]
		if !ok {
			var err error
			if n, err = s.exitCounts(now, k[0], k[1]); err != nil {
				return err
			}
		}
		if err := s.writeCounts(now, k[0], k[1], n); err != nil {
			return err
		}
	}
	return nil
}

// sortedThreads returns the pid and tid pairs in order.
func sortedThreads(threads map[[2]uint32]bool) [][2]uint32 {
	return slices.SortedFunc(maps.Keys(threads), func(a, b [2]uint32) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
}

func toCounts(n perf.TaskCounts) counts {
	return counts{n.PageFaults, n.Migrations}
}

// readExits reads the in-kernel exit counts of every thread at time now
// and the bases taken at exec, and counts as lost the threads they had
// no room for.
func (s *session) readExits(now uint64) error {
	c := &s.counters
	all, err := c.tc.Exits()
	if err != nil {
		return err
	}
	clear(c.exits)
	if c.exits == nil {
		c.exits = map[uint32][]exitCount{}
	}
	for k, n := range all {
		c.exits[k.TID] = append(c.exits[k.TID], exitCount{key: k, n: n})
	}
	c.exitsTime = now
	execs, err := c.tc.Execs()
	if err != nil {
		return err
	}
	for k, n := range execs {
		c.bases[[2]uint32{k.PID, k.TID}] = countBase{before: k.Start, n: n}
	}
	dropped, err := c.tc.Dropped()
	if err != nil {
		return err
	}
	if dropped > c.dropped {
		fmt.Fprintf(s.log, "trueprof: page faults and migrations of %d threads or processes not counted: more than %d exited threads or %d processes at once\n", dropped-c.dropped, perf.ThreadCountsEntries, perf.ThreadCountsProcs)
		s.lost(trace.LostKernel, dropped-c.dropped, now)
		c.dropped = dropped
	}
	return nil
}

// takeBase returns and forgets the base of the incarnation of pid/tid
// that started at start, if it had one.
func (c *counterState) takeBase(pid, tid uint32, start uint64) perf.TaskCounts {
	k := [2]uint32{pid, tid}
	b, ok := c.bases[k]
	if !ok || start > b.before {
		return perf.TaskCounts{}
	}
	delete(c.bases, k)
	return b.n
}

// exitCounts returns the counts of the thread that exited at time,
// taking them from the kernel (the incarnation of pid/tid that started
// last by then: a later one is a new thread with the id, whose counts
// stay) or from the fallback's samples.
func (s *session) exitCounts(time uint64, pid, tid uint32) (counts, error) {
	c := &s.counters
	if c.tc == nil {
		s.side.mu.Lock()
		defer s.side.mu.Unlock()
		var n counts
		if p := c.counts[[2]uint32{pid, tid}]; p != nil {
			n = *p
			delete(c.counts, [2]uint32{pid, tid})
		}
		return n, nil
	}
	if time > c.exitsTime {
		// Counts read after the thread's exit hold its final counts.
		if err := s.readExits(perf.Now()); err != nil {
			return counts{}, err
		}
	}
	es := c.exits[tid]
	best := -1
	for i, e := range es {
		if e.key.PID == pid && e.key.Start <= time && (best < 0 || e.key.Start > es[best].key.Start) {
			best = i
		}
	}
	if best < 0 {
		return counts{}, nil // not counted: it exited before it was
	}
	e := es[best]
	c.exits[tid] = slices.Delete(es, best, best+1)
	return toCounts(e.n.Sub(c.takeBase(pid, tid, e.key.Start))), c.tc.Delete(e.key)
}

// writeCounts writes the Counter records of a thread.
func (s *session) writeCounts(time uint64, pid, tid uint32, n counts) error {
	c := &s.counters
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

package record

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// Per-thread counters (page faults, CPU migrations) are perf counting
// events opened like the sampling event, one per thread and CPU, with
// inherit_stat: when a thread that inherited them exits, the kernel
// writes a PERF_RECORD_READ per CPU with that thread's own count into
// the sampling ring (just after the thread's exit record), and a Counter
// record with their sum is written once all of them arrived.
//
// The threads the descriptors were opened on (the launched process, or
// each thread of an attached one) write no such record: each is the
// origin of a family of threads that inherited its events, and reading
// its descriptors gives the family's total. Its own count, written when
// recording ends, is that total less what the rest of the family
// reported and what its live members counted.
//
// All of that needs the events to stay with their threads
// (perf.CounterOptions.KeepWithThread, Linux 6.12). Without it the
// kernel swaps the contexts of two threads of a family on a context
// switch, and with them the values of events it pairs by position,
// which may be a page-fault counter and a sampling clock: measured here,
// a thread that faulted a few pages was given millions. Older kernels
// therefore get no per-thread counters.
//
// Other threads still alive when recording ends have no value the
// kernel reports; theirs come from /proc (minflt+majflt of
// /proc/PID/task/TID/stat, se.nr_migrations of .../sched), counted since
// their creation, which was after their origin's events were opened.
// See docs/recording.md for how those compare.

// counterKinds are the counters recorded, in the order of counts' arrays.
var counterKinds = [...]struct {
	event string
	kind  trace.CounterKind
}{
	{"page-faults", trace.CounterPageFaults},
	{"cpu-migrations", trace.CounterMigrations},
}

type counts [len(counterKinds)]uint64

// counterEvent is one opened counter: kind (an index of counterKinds) of
// family, the thread it was opened on, on one CPU.
type counterEvent struct {
	fd     int
	kind   int
	family uint32
}

// counterState is the per-thread counting of a session.
type counterState struct {
	off    bool                    // gave up after a warning
	events map[uint64]counterEvent // by event id
	// origins are the threads the events were opened on, by tid.
	origins map[uint32]origin
	// family maps a live thread to the origin whose events it inherited.
	family map[uint32]uint32
	// ended are threads that exited and whose read records may follow,
	// with their pids.
	ended map[uint32]uint32
	// reading are the counts of threads whose read records are arriving;
	// reported is what each family's threads reported.
	reading  map[uint32]*counts
	reads    map[uint32]int
	reported map[uint32]*counts
	rec      trace.Counter // reused by writeCounts
}

// origin is a thread the events were opened on.
type origin struct {
	pid uint32
	// events is how many were opened on it: a thread of its family
	// writes that many read records when it exits.
	events int
}

// openCounters opens the counters of thread tid of pid on cpu, sending
// their records to the ring of event owner. A failure other than the
// thread having ended is reported once and the session goes on without
// counters.
func (s *session) openCounters(pid, tid, cpu, owner int, kernel, launched bool) {
	c := &s.counters
	if c.off {
		return
	}
	if c.events == nil {
		c.events, c.origins, c.family = map[uint64]counterEvent{}, map[uint32]origin{}, map[uint32]uint32{}
		c.ended = map[uint32]uint32{}
		c.reading, c.reads, c.reported = map[uint32]*counts{}, map[uint32]int{}, map[uint32]*counts{}
	}
	o, ok := c.origins[uint32(tid)]
	if !ok {
		o = origin{pid: uint32(pid)}
	}
	for kind, k := range counterKinds {
		err := s.openCounter(tid, cpu, owner, kind, k.event, kernel, launched)
		if !launched && errors.Is(err, syscall.ESRCH) {
			return // the thread ended meanwhile
		}
		if err != nil {
			c.off = true
			fmt.Fprintf(s.log, "trueprof: per-thread counters not recorded: %v\n", err)
			return
		}
		o.events++
	}
	c.origins[uint32(tid)] = o
	c.family[uint32(tid)] = uint32(tid)
}

func (s *session) openCounter(tid, cpu, owner, kind int, name string, kernel, launched bool) error {
	c := &s.counters
	ev, err := perf.ParseEvent(name)
	if err != nil {
		return err
	}
	o := perf.CounterOptions{Kernel: kernel, EnableOnExec: launched, KeepWithThread: true}
	fd, err := perf.Open(perf.CounterAttr(ev, o), tid, cpu, 0)
	if errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("they need Linux 6.12 or later (inherited events with PERF_SAMPLE_READ): %w", err)
	}
	if err != nil {
		return err
	}
	s.events = append(s.events, event{fd: fd})
	if err := perf.SetOutput(fd, owner); err != nil {
		return err
	}
	id, err := perf.EventID(fd)
	if err != nil {
		return err
	}
	c.events[id] = counterEvent{fd: fd, kind: kind, family: uint32(tid)}
	return nil
}

// trackCounters follows a kernel record: a fork puts the child in its
// creator's family, and the read records that follow a thread's exit
// are summed until the last one, which writes its Counter records.
// Read records of threads never seen as the target's are dropped: a
// launched target's exec ends the exec wrapper's other threads, which
// had inherited the events.
func (s *session) trackCounters(r *perf.Record) error {
	c := &s.counters
	if c.events == nil || c.off {
		return nil
	}
	switch r.Type {
	case perf.RecordRead:
		ev, ok := c.events[r.ID]
		if !ok || (c.ended[r.TID] != r.PID && !s.threads.target(r.PID, r.TID)) {
			return nil
		}
		n := c.reading[r.TID]
		if n == nil {
			n = &counts{}
			c.reading[r.TID] = n
		}
		n[ev.kind] += r.Value
		sum := c.reported[ev.family]
		if sum == nil {
			sum = &counts{}
			c.reported[ev.family] = sum
		}
		sum[ev.kind] += r.Value
		if c.reads[r.TID]++; c.reads[r.TID] < c.origins[ev.family].events {
			return nil
		}
		delete(c.reading, r.TID)
		delete(c.reads, r.TID)
		delete(c.ended, r.TID)
		return s.writeCounts(r.Time, r.PID, r.TID, n)
	case perf.RecordFork:
		if f, ok := c.family[r.PTID]; ok {
			c.family[r.TID] = f
		}
		delete(c.ended, r.TID)
	case perf.RecordExit:
		c.ended[r.TID] = r.PID
		delete(c.family, r.TID)
	}
	return nil
}

// finishCounters writes the Counter records of the threads still alive
// and of the families' origins, once the last records are processed and
// before a launched target is stopped.
func (s *session) finishCounters() error {
	c := &s.counters
	if c.events == nil || c.off {
		return nil
	}
	now := perf.Now()
	live := map[uint32]*counts{} // by family
	for _, tid := range slices.Sorted(maps.Keys(s.threads.live)) {
		f, member := c.family[tid]
		if _, origin := c.origins[tid]; origin {
			continue // its share of its events' total is exact
		}
		th := s.threads.live[tid]
		n, ok := procCounts(int(th.pid), int(tid))
		if !ok {
			continue // gone since
		}
		if member {
			if live[f] == nil {
				live[f] = &counts{}
			}
			for k := range n {
				live[f][k] += n[k]
			}
		}
		if err := s.writeCounts(now, th.pid, tid, &n); err != nil {
			return err
		}
	}
	total := map[uint32]*counts{}
	for _, ev := range c.events {
		v, _, err := perf.ReadCounter(ev.fd)
		if err != nil {
			return err
		}
		if total[ev.family] == nil {
			total[ev.family] = &counts{}
		}
		total[ev.family][ev.kind] += v
	}
	for _, f := range slices.Sorted(maps.Keys(total)) {
		n := *total[f]
		for _, sub := range []*counts{c.reported[f], live[f]} {
			for k := range n {
				if sub != nil {
					n[k] -= min(sub[k], n[k])
				}
			}
		}
		if err := s.writeCounts(now, c.origins[f].pid, f, &n); err != nil {
			return err
		}
	}
	return nil
}

func (s *session) writeCounts(time uint64, pid, tid uint32, n *counts) error {
	for k, ck := range counterKinds {
		s.counters.rec = trace.Counter{Time: time, PID: pid, TID: tid, Kind: ck.kind, Value: n[k]}
		if err := s.w.Write(&s.counters.rec); err != nil {
			return err
		}
	}
	return nil
}

// procCounts reads a thread's page faults and migrations since it was
// created from /proc; false if it is gone. Migrations need
// CONFIG_SCHED_DEBUG (the sched file) and are 0 without it.
func procCounts(pid, tid int) (counts, bool) {
	var n counts
	dir := fmt.Sprintf("/proc/%d/task/%d/", pid, tid)
	b, err := os.ReadFile(dir + "stat")
	if err != nil {
		return n, false
	}
	// Fields after the parenthesised name: state ppid pgrp session
	// tty_nr tpgid flags minflt cminflt majflt ...
	stat := string(b)
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) <= 9 {
		return n, false
	}
	minflt, err1 := strconv.ParseUint(f[7], 10, 64)
	majflt, err2 := strconv.ParseUint(f[9], 10, 64)
	if err1 != nil || err2 != nil {
		return n, false
	}
	n[0] = minflt + majflt
	if b, err := os.ReadFile(dir + "sched"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "se.nr_migrations"); ok {
				n[1], _ = strconv.ParseUint(strings.TrimSpace(strings.TrimLeft(v, " \t:")), 10, 64)
			}
		}
	}
	return n, true
}

package record

import (
	"trueprof/internal/perf"
)

// targetThreads are the target's threads alive at the point the merged
// record stream has reached. The sampling events are the target's own
// (opened on it and inherited), so every thread their records name is a
// target thread; events opened for all tasks of a CPU (interrupts) ask
// here whose a record is.
type targetThreads struct {
	live map[uint32]targetThread // by tid
}

type targetThread struct {
	pid uint32
	// execed is false for a launched target until its exec: until then
	// the process is trueprof's exec wrapper.
	execed bool
}

// add records a target thread; a thread already known under pid only
// learns that it exec'ed.
func (t *targetThreads) add(pid, tid uint32, execed bool) {
	if t.live == nil {
		t.live = map[uint32]targetThread{}
	}
	if old, ok := t.live[tid]; ok && old.pid == pid && (old.execed || !execed) {
		return
	}
	t.live[tid] = targetThread{pid: pid, execed: execed}
}

// track follows a record of the sampling rings: a fork adds a thread, an
// exit removes it, and any other record of the thread itself (written
// only once counting began, after a launched target's exec) proves it
// alive and exec'ed, also when its fork came before the events were
// enabled.
func (t *targetThreads) track(r *perf.Record) {
	switch r.Type {
	case perf.RecordFork:
		t.add(r.PID, r.TID, true)
	case perf.RecordExit:
		delete(t.live, r.TID)
	case perf.RecordComm, perf.RecordSwitch, perf.RecordSample, perf.RecordMmap2, perf.RecordMmap:
		if r.PID != 0 {
			t.add(r.PID, r.TID, true)
		}
	}
}

// target reports whether tid of pid is a target thread now.
func (t *targetThreads) target(pid, tid uint32) bool {
	th, ok := t.live[tid]
	return ok && th.pid == pid && th.execed
}

// openedThread notes a thread the sampling events were opened on and
// opens its counters on cpu.
func (s *session) openedThread(pid, tid, cpu int, kernel, launched bool) {
	s.threads.add(uint32(pid), uint32(tid), !launched)
	s.openCounters(pid, tid, cpu, kernel, launched)
}

// track passes a kernel record to the interrupt pairing, which consumes
// it (done), or to the thread and counter tracking.
func (s *session) track(r *perf.Record) (done bool, err error) {
	if r.Raw != nil {
		return true, s.processIRQ(r)
	}
	s.threads.track(r)
	return false, s.trackCounters(r)
}

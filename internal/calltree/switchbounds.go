package calltree

import "trueprof/internal/model"

// switchBounds follows the switch-ins of each CPU as the replay meets
// them, in time order, for the lost switch-outs they bound: when the
// kernel lost a thread's switch-out (its ring was full), the next
// switch-in of another thread on the CPU it ran on is the latest moment
// it can have left it. A loaded replay and a streamed one (which holds
// no switches) see the same switch-ins in the same order, so they bound
// alike; each shard of a parallel replay sees them all (runShards). Nil
// for a recording that lost no kernel records, which is taken as it is.
//
// Each thread waits on the CPU of its last switch-in for the first two
// later switch-ins there that name different threads (afterIn): the
// first of them that is not the thread's is the bound, whichever thread
// the query names (a goroutine changes threads). So it holds at most a
// wait per thread and CPU, not the switches.
type switchBounds struct {
	waits map[uint32][]wait // by CPU
}

// wait is a thread waiting on a CPU since its switch-in of generation
// gen (afterIn.gen): a later switch-in of the thread makes it stale.
type wait struct {
	th  *thread
	gen uint64
}

// afterIn is what followed a thread's last switch-in on its CPU: the
// first later switch-in there (first, of the thread firstKey, a
// pid<<32 | tid) and the first after it of another thread (other).
type afterIn struct {
	gen                  uint64
	first, other         uint64
	firstKey             uint64
	seenFirst, seenOther bool
}

// newSwitchBounds returns the switch bounds of a replay of p: nil when p
// lost no kernel records.
func newSwitchBounds(p *model.Profile) *switchBounds {
	if p.Lost.Kernel == 0 {
		return nil
	}
	return &switchBounds{waits: map[uint32][]wait{}}
}

// in notes switch-in s, of any thread (filtered out or not), for the
// threads waiting on its CPU; those whose bound it settles, and the
// stale ones, stop waiting.
func (b *switchBounds) in(s *model.Switch) {
	ws := b.waits[s.CPU]
	key := uint64(s.PID)<<32 | uint64(s.TID)
	keep := ws[:0]
	for _, w := range ws {
		th := w.th
		a := &th.after
		if a.gen != w.gen {
			continue
		}
		switch {
		case s.Time <= th.onSince:
			// At the switch-in's own time: not after it.
		case !a.seenFirst:
			a.first, a.firstKey, a.seenFirst = s.Time, key, true
		case key != a.firstKey:
			a.other, a.seenOther = s.Time, true
			continue // settled
		}
		keep = append(keep, w)
	}
	clear(ws[len(keep):])
	b.waits[s.CPU] = keep
}

// wait makes th, just switched in on th.onCPU, wait there.
func (b *switchBounds) wait(th *thread) {
	th.after = afterIn{gen: th.after.gen + 1}
	b.waits[th.onCPU] = append(b.waits[th.onCPU], wait{th: th, gen: th.after.gen})
}

// nextForeign returns the time of the first switch-in, after th's last,
// on its CPU of a thread other than pid/tid, among those seen so far;
// false if there is none yet.
func (th *thread) nextForeign(pid, tid uint32) (uint64, bool) {
	a := &th.after
	switch {
	case a.seenFirst && a.firstKey != uint64(pid)<<32|uint64(tid):
		return a.first, true
	case a.seenOther:
		return a.other, true
	}
	return 0, false
}

// boundLostSwitchOut ends th's on-CPU time, begun on its last switch-in,
// when another thread was switched in on that CPU before before (the
// replay has met every switch-in before it): th's switch-out was lost.
// It counts the repair. A recording that lost no kernel records is taken
// as it is.
func (a *replay) boundLostSwitchOut(th *thread, before uint64) {
	if th.off || !th.onKnown || th.os == nil || a.bounds == nil {
		return
	}
	k := th.os.key
	if t, ok := th.nextForeign(k.pid, k.tid); ok && t < before {
		th.stop(t)
		th.repairs.Switches++
	}
}

// lostExitEnd is when incarnation mt, whose exit the kernel lost (the
// recording lost records), ended at the latest: when the last of its
// process's threads whose exit was recorded exited, once its main thread
// had exited (no thread outlives its process); else the end of the
// recording.
func (a *replay) lostExitEnd(mt *model.Thread) uint64 {
	main, _, _ := a.p.ThreadSpan(mt.PID, mt.PID, mt.Start)
	if main == nil || main == mt || main.End <= mt.Start {
		return a.end
	}
	end := main.End
	for i := range a.p.Threads {
		if t := a.p.Threads[i]; t.PID == mt.PID && t.Start <= main.End {
			end = max(end, t.End)
		}
	}
	return min(end, a.end)
}

// boundAtEnd bounds th's on-CPU time at its end (boundLostSwitchOut). A
// thread still on a CPU then whose exit is not recorded, in a recording
// that lost kernel records and ended because its target exited (so the
// thread did too), has no known switch-out at all: its CPU time runs to
// its end, which is counted as a lost switch too.
func (a *replay) boundAtEnd(th *thread) {
	a.boundLostSwitchOut(th, th.end)
	exited := a.p.End != nil && a.p.End.Reason == "exited"
	if !th.off && th.onKnown && exited && a.p.Lost.Kernel > 0 && th.os != nil && (th.os.mt == nil || th.os.mt.End == 0) {
		th.repairs.Switches++
	}
}

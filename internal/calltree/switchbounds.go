package calltree

import (
	"sort"

	"trueprof/internal/model"
)

// cpuSwitchIns are the recording's switch-ins by CPU, in time order: when
// the kernel lost a thread's switch-out (its ring was full), the next
// switch-in of another thread on the CPU it ran on is the latest moment
// it can have left it. Built on the first lost switch a replay meets,
// from the loaded recording's switches (a streamed replay has none, and
// bounds nothing).
type cpuSwitchIns map[uint32][]switchIn

type switchIn struct {
	time uint64
	key  uint64 // pid<<32 | tid
}

func newCPUSwitchIns(sw []model.Switch) cpuSwitchIns {
	c := cpuSwitchIns{}
	for i := range sw {
		if s := &sw[i]; !s.Out {
			c[s.CPU] = append(c[s.CPU], switchIn{time: s.Time, key: uint64(s.PID)<<32 | uint64(s.TID)})
		}
	}
	for _, ins := range c {
		sort.SliceStable(ins, func(i, j int) bool { return ins[i].time < ins[j].time })
	}
	return c
}

// nextForeign returns the time of the first switch-in on cpu after t of a
// thread other than pid/tid, and false if there is none.
func (c cpuSwitchIns) nextForeign(cpu, pid, tid uint32, t uint64) (uint64, bool) {
	ins := c[cpu]
	key := uint64(pid)<<32 | uint64(tid)
	for i := sort.Search(len(ins), func(i int) bool { return ins[i].time > t }); i < len(ins); i++ {
		if ins[i].key != key {
			return ins[i].time, true
		}
	}
	return 0, false
}

// boundLostSwitchOut ends th's on-CPU time, begun on its last switch-in,
// when another thread was switched in on that CPU before before: th's
// switch-out was lost. It counts the repair. A recording that lost no
// kernel records is taken as it is.
func (a *replay) boundLostSwitchOut(th *thread, before uint64) {
	if th.off || !th.onKnown || th.os == nil || a.p.Lost.Kernel == 0 {
		return
	}
	if a.switchIns == nil {
		a.switchIns = newCPUSwitchIns(a.p.Switches)
	}
	k := th.os.key
	if t, ok := a.switchIns.nextForeign(th.onCPU, k.pid, k.tid, th.onSince); ok && t < before {
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

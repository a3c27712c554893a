package calltree

// A preemption costs the preempted thread CPU time beyond the time it was
// switched out: the scheduler's path on both sides of the switch and the
// caches, TLB and branch predictors another process left cold. Probes
// invite preemptions (every return from a trap is a point where the
// scheduler may give the CPU away): measured on the held-out loop at load
// 9-18, 3.5 switches a millisecond under uprobes against 0.36
// uninstrumented, and an interval with a switch in it held 15-18 µs more
// CPU than the same node's intervals of the same transition without one
// (24-26 µs after a single-stepped probe). That time is not the
// program's: calibrated CPU times lose it, at the cost the recording
// itself shows (docs/calibration.md, "Switch cost").
//
// The replay keeps, per thread, the mean on-CPU time of each node's
// intervals between two events of one transition kind without a switch
// (a group), and the intervals with exactly one involuntary switch and
// nothing else in them; at the end each of those has an excess, how much
// more CPU it held than its group's mean. The excess is bimodal (about
// 1 µs or 17 µs on the held-out loop, in every group), so its mean, not
// its median, is what the switches cost in all. Each node's CPU time
// loses, per switched interval of a group with enough of them, its
// group's mean excess, and per other involuntary switch the mean over
// the recording.

// minSwitchIntervals is how many switched intervals, each beside enough
// clean ones (minCleanIntervals) of its group, measure a switch cost:
// fewer say nothing a recording can trust.
const (
	minSwitchIntervals = 8
	minCleanIntervals  = 16
)

// groupCPU is what the switch cost needs of a group of intervals: the
// on-CPU time (calibrated) and number of those without a switch (clean)
// and of those with exactly one involuntary switch and nothing else in
// them (switched). Sums, not the intervals: a switched interval's
// excess over its group's clean mean adds up to the switched sum less
// their number times that mean.
type groupCPU struct {
	clean, switched   float64
	nClean, nSwitched uint32
}

// SwitchCost is the CPU time preemptions cost the threads of a
// recording, measured in it, and removed from their calibrated CPU time.
type SwitchCost struct {
	// NS is the mean cost of a switch over the recording; 0 when not
	// measured (fewer than minSwitchIntervals intervals).
	NS float64 `json:"ns"`
	// Intervals counts the switched intervals measured.
	Intervals int `json:"intervals"`
	// Removed is the CPU time removed in all.
	Removed float64 `json:"removed_ns"`
}

// noteSwitchCost notes an interval of th's current node between two
// events of transition kind, of on-CPU time cpu, for the switch cost.
func (th *thread) noteSwitchCost(kind int, cpu float64) {
	if th.pend.adjWall > 0 || th.pend.dispatches > 1 || th.pend.dispatches != th.pend.invol {
		return // the profiler paused inside, or not one preemption
	}
	g := int(th.current())*4 + kind
	if g >= len(th.groups) {
		th.groups = append(th.groups, make([]groupCPU, g+1-len(th.groups)+4*8)...)
	}
	gr := &th.groups[g]
	if th.pend.dispatches == 0 {
		gr.clean += cpu
		gr.nClean++
	} else {
		gr.switched += cpu
		gr.nSwitched++
	}
}

// excess returns the summed excess of a group's switched intervals over
// its clean intervals' mean, and false when it has too few clean ones.
func (gr *groupCPU) excess() (float64, bool) {
	if gr.nClean < minCleanIntervals || gr.nSwitched == 0 {
		return 0, false
	}
	return gr.switched - float64(gr.nSwitched)*gr.clean/float64(gr.nClean), true
}

// measureSwitchCost returns the mean switch cost the threads' switched
// intervals show (zero when too few).
func measureSwitchCost(threads []*thread) SwitchCost {
	var sc SwitchCost
	sum := 0.0
	for _, th := range threads {
		for i := range th.groups {
			if x, ok := th.groups[i].excess(); ok {
				sum += x
				sc.Intervals += int(th.groups[i].nSwitched)
			}
		}
	}
	if sc.Intervals >= minSwitchIntervals {
		sc.NS = max(0, sum/float64(sc.Intervals))
	}
	return sc
}

// switchCosts returns, per node of th, the CPU time its involuntary
// switches cost: its groups' mean excess for each of their switched
// intervals when they have enough, else sc's mean, as for its other
// involuntary switches. Nil when sc measured nothing.
func switchCosts(th *thread, sc *SwitchCost) []float64 {
	if sc.NS == 0 {
		return nil
	}
	cost := make([]float64, len(th.nodes))
	for i := range th.nodes {
		cost[i] = sc.NS * float64(th.nodes[i].base.Involuntary)
	}
	for g := range th.groups {
		gr := &th.groups[g]
		if x, ok := gr.excess(); ok && gr.nSwitched >= minSwitchIntervals {
			n := float64(gr.nSwitched)
			cost[g/4] += n * (max(0, x/n) - sc.NS)
		}
	}
	return cost
}

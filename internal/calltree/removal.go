package calltree

import (
	"cmp"
	"slices"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// Probes removed while the target ran (trueprof ctl trace remove, root):
// a Probe record of mechanism trace.ProbeRemoved says a function's probe
// came off at its time, so the exits of its calls open then are never
// seen. As at the end of an instrumented recording (End.Detached), those
// calls end when their probe came off, with the calls they made still
// open, counted in Repairs.Detached: no call outlives its probe, none
// nests a later one (no false recursion), and no time runs backwards.
// Each thread applies the removals lazily, at its first record after
// them (owner) or its end (sweep): nothing changes a thread's state
// between its records.

// removals returns p's probe removals in time order.
func removals(p *model.Profile) []model.Probe {
	var out []model.Probe
	for _, pr := range p.Probes {
		if pr.Mech == trace.ProbeRemoved {
			out = append(out, pr)
		}
	}
	slices.SortStableFunc(out, func(a, b model.Probe) int { return cmp.Compare(a.Time, b.Time) })
	return out
}

// removeProbes applies to th the removals up to time t it has not yet:
// each ends th's open calls of the function from its outermost one up.
func (a *replay) removeProbes(th *thread, t uint64) {
	for ; th.removal < len(a.removals) && a.removals[th.removal].Time <= t; th.removal++ {
		r := &a.removals[th.removal]
		if r.PID != th.key.pid || int(r.Function) >= len(th.onLoc) || th.onLoc[r.Function] == 0 {
			continue
		}
		i := slices.IndexFunc(th.stack, func(f frame) bool { return f.loc == r.Function })
		a.closeDownTo(th, i, max(r.Time, th.last), FlowDetach, FlowDetached, &th.repairs.Detached)
	}
}

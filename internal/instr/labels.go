package instr

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"trueprof/internal/model"
)

// ErrBadLabel: a label pattern of Options.Labels is not KEY=GLOB.
var ErrBadLabel = errors.New("label pattern is not KEY=VALUE")

// LabelMatcher selects goroutines by their runtime/pprof labels, the
// way a Go program says which request or job a goroutine serves. It
// holds KEY=GLOB patterns: a goroutine matches when, for every key the
// patterns name, it carries that key with a value one of the key's globs
// (path.Match) matches. The zero LabelMatcher matches everything.
type LabelMatcher map[string][]string

// ParseLabels makes the LabelMatcher of patterns ("worker=2",
// "tenant=a*"); it fails with ErrBadLabel, wrapped with the pattern,
// for one without "=" or with a bad glob.
func ParseLabels(patterns []string) (LabelMatcher, error) {
	var m LabelMatcher
	for _, p := range patterns {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q", ErrBadLabel, p)
		}
		if _, err := path.Match(v, ""); err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrBadLabel, p, err)
		}
		if m == nil {
			m = LabelMatcher{}
		}
		m[k] = append(m[k], v)
	}
	return m, nil
}

// Match reports whether a goroutine carrying labels passes m.
func (m LabelMatcher) Match(labels []model.LabelPair) bool {
	for k, globs := range m {
		found := false
		for _, l := range labels {
			if l.Key != k {
				continue
			}
			for _, g := range globs {
				if ok, _ := path.Match(g, l.Value); ok {
					found = true
				}
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// FilterLabels returns p with only the samples, events, interrupts and
// adjustments of the goroutines that carry labels m matches at their
// time: a thread's record belongs to the goroutine it last switched to,
// and a record before its first switch to none, which carries no labels.
// Context and goroutine switches stay, so that time off CPU and the
// goroutines' runs are measured as before. The result shares p's other
// slices; p is unchanged. It returns p itself for the zero m.
func FilterLabels(p *model.Profile, m LabelMatcher) *model.Profile {
	if len(m) == 0 {
		return p
	}
	labels := p.GoLabels()
	// The goroutine each thread runs, advanced through p.GoIDs in time
	// order: every filtered slice is sorted by time.
	keep := func() func(t uint64, pid, tid uint32) bool {
		running := map[[2]uint32]uint64{}
		g := 0
		return func(t uint64, pid, tid uint32) bool {
			for ; g < len(p.GoIDs) && p.GoIDs[g].Time <= t; g++ {
				r := &p.GoIDs[g]
				running[[2]uint32{r.PID, r.TID}] = r.GoID
			}
			goid, ok := running[[2]uint32{pid, tid}]
			return ok && m.Match(labels.At(pid, goid, t))
		}
	}
	q := *p
	q.Samples = filterTimed(p.Samples, keep(), func(r *model.Sample) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID })
	q.Events = filterTimed(p.Events, keep(), func(r *model.Event) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID })
	q.IRQs = filterTimed(p.IRQs, keep(), func(r *model.IRQ) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID })
	q.Adjusts = filterTimed(p.Adjusts, keep(), func(r *model.Adjust) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID })
	return &q
}

// filterTimed returns the records of rs, sorted by time, that keep keeps.
func filterTimed[R any](rs []R, keep func(t uint64, pid, tid uint32) bool, key func(*R) (uint64, uint32, uint32)) []R {
	var out []R
	for i := range rs {
		if keep(key(&rs[i])) {
			out = append(out, rs[i])
		}
	}
	return out
}

// unlabelled reports whether a label filter leaves th out: a goroutine
// that never carried the labels, a thread left with no event or sample.
func (a *analysis) unlabelled(th *thread) bool {
	if len(a.o.Labels) == 0 {
		return false
	}
	if !th.key.goroutine {
		if th.events > 0 {
			return false
		}
		for i := range th.nodes {
			if th.nodes[i].base.Samples > 0 {
				return false
			}
		}
		return true
	}
	for _, l := range a.labels.Changes(th.key.pid, th.key.goid) {
		if a.o.Labels.Match(l.Pairs) {
			return false
		}
	}
	return true
}

// labelMap is the JSON form of the labels a goroutine carried
// (model.GoLabels.Carried): the values of a key it carried several of
// are joined by commas, in order.
func labelMap(pairs []model.LabelPair) map[string]string {
	if len(pairs) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, l := range pairs {
		if v, ok := m[l.Key]; ok {
			m[l.Key] = v + "," + l.Value
		} else {
			m[l.Key] = l.Value
		}
	}
	return m
}

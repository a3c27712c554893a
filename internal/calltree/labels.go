package calltree

// unlabelled reports whether a label filter leaves th out: a goroutine
// that never carried the labels, a thread left with no event or sample.
func (a *replay) unlabelled(th *thread) bool {
	if len(a.o.Filter.LabelMatcher()) == 0 {
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
		if a.o.Filter.Labels(l.Pairs) {
			return false
		}
	}
	return true
}

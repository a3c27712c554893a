package symbolize

import (
	"container/heap"
	"slices"
	"sort"
)

// span is a half-open address range [lo, hi) owned by entry id of some
// table kept by the caller.
type span struct {
	lo, hi uint64
	id     int32
}

// flatten turns possibly overlapping spans into sorted, disjoint spans.
// Where spans overlap, the one for which better reports true against the
// others owns the overlap; when the better span ends, the next best one
// that still covers the address takes over again. Empty spans are dropped.
// Adjacent pieces of the same id are merged.
func flatten(in []span, better func(a, b span) bool) []span {
	spans := make([]span, 0, len(in))
	for _, s := range in {
		if s.hi > s.lo {
			spans = append(spans, s)
		}
	}
	if len(spans) == 0 {
		return nil
	}
	slices.SortFunc(spans, func(a, b span) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	// Fast path: already disjoint, which is the common case for symbol
	// tables.
	disjoint := true
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			disjoint = false
			break
		}
	}
	if disjoint {
		return spans
	}

	points := make([]uint64, 0, 2*len(spans))
	for _, s := range spans {
		points = append(points, s.lo, s.hi)
	}
	slices.Sort(points)
	points = slices.Compact(points)

	h := &spanHeap{better: better}
	var out []span
	next := 0
	for i, p := range points {
		for next < len(spans) && spans[next].lo == p {
			heap.Push(h, spans[next])
			next++
		}
		// Spans that ended are removed only once they reach the top:
		// below the top they cannot own anything.
		for h.Len() > 0 && h.s[0].hi <= p {
			heap.Pop(h)
		}
		if h.Len() == 0 || i+1 == len(points) {
			continue
		}
		top := h.s[0]
		end := points[i+1]
		if n := len(out); n > 0 && out[n-1].id == top.id && out[n-1].hi == p {
			out[n-1].hi = end
			continue
		}
		out = append(out, span{lo: p, hi: end, id: top.id})
	}
	return out
}

// findSpan returns the index of the span of sorted, disjoint spans that
// contains addr, or -1.
func findSpan(spans []span, addr uint64) int {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].hi > addr })
	if i < len(spans) && spans[i].lo <= addr {
		return i
	}
	return -1
}

type spanHeap struct {
	s      []span
	better func(a, b span) bool
}

func (h *spanHeap) Len() int           { return len(h.s) }
func (h *spanHeap) Less(i, j int) bool { return h.better(h.s[i], h.s[j]) }
func (h *spanHeap) Swap(i, j int)      { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *spanHeap) Push(x any)         { h.s = append(h.s, x.(span)) }
func (h *spanHeap) Pop() any {
	n := len(h.s) - 1
	x := h.s[n]
	h.s = h.s[:n]
	return x
}

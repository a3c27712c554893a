package record

import (
	"trueprof/internal/perf"
)

// sortByTime orders recs by time, stably, in place, where the first
// sorted of them are in time order already (the records kept from the
// last drain), and returns scratch, grown as needed, for the next call.
//
// The records added since are a few runs in time order: each ring's,
// then the side rings'. slices.SortStableFunc moved the 272-byte records
// in place O(n log² n) times: 835,000 of them (a burst of 850,000
// context switches a second) held the loop for seconds while the rings
// overflowed. Here the new runs are merged pairwise through scratch,
// each record copied once per halving of their number, and then merged
// with only those kept records that are later than the first new one:
// the kept records can be millions while the hooks' events lag behind
// the kernel's, and sorting them again at every drain copied them all.
func sortByTime(recs []perf.Record, sorted int, scratch []perf.Record) []perf.Record {
	tail := recs[sorted:]
	var starts []int // the new runs' first indices in tail, and len(tail)
	for i := range tail {
		if i == 0 || tail[i].Time < tail[i-1].Time {
			starts = append(starts, i)
		}
	}
	if len(starts) == 0 {
		return scratch
	}
	if len(starts) > 1 {
		starts = append(starts, len(tail))
		scratch = grow(scratch, len(tail))
		src, dst := tail, scratch
		for len(starts) > 2 {
			next := starts[:0:0]
			for k := 0; k+1 < len(starts); k += 2 {
				lo := starts[k]
				next = append(next, lo)
				if k+2 >= len(starts) {
					// An odd run out: copied as it is.
					copy(dst[lo:], src[lo:])
					break
				}
				mergeRuns(dst[lo:starts[k+2]], src[lo:starts[k+1]], src[starts[k+1]:starts[k+2]])
			}
			starts = append(next, len(tail))
			src, dst = dst, src
		}
		if &src[0] != &tail[0] {
			copy(tail, src)
		}
	}
	// The kept records later than the first new one: with equal times
	// the kept come first.
	p := before(recs[:sorted], tail[0].Time+1)
	if p < sorted {
		scratch = grow(scratch, len(recs)-p)
		mergeRuns(scratch, recs[p:sorted], tail)
		copy(recs[p:], scratch)
	}
	clear(scratch) // the copies in recs own the records' buffers
	return scratch[:0]
}

// mergeRuns merges the time-ordered a and b into dst, a's records first
// among equal times.
func mergeRuns(dst, a, b []perf.Record) {
	i, j, k := 0, 0, 0
	for i < len(a) && j < len(b) {
		if b[j].Time < a[i].Time {
			dst[k] = b[j]
			j++
		} else {
			dst[k] = a[i]
			i++
		}
		k++
	}
	k += copy(dst[k:], a[i:])
	copy(dst[k:], b[j:])
}

// grow returns buf with length n, reallocated when too small.
func grow(buf []perf.Record, n int) []perf.Record {
	if cap(buf) < n {
		return make([]perf.Record, n)
	}
	return buf[:n]
}

package record

import "trueprof/internal/perf"

// sortByTime orders recs by time, stably, and returns the sorted records
// and the buffer left over for the next call (scratch, or recs' own).
//
// The loop's pending records are a few runs already in time order: the
// records kept from the last drain, then each ring's, then the side
// rings'. slices.SortStableFunc moved the 272-byte records in place
// O(n log² n) times: 835,000 records (a burst of 850,000 context
// switches a second) held the loop for seconds while the rings
// overflowed. Merging the runs pairwise through scratch copies each
// record once per halving of the number of runs.
func sortByTime(recs, scratch []perf.Record) (sorted, spare []perf.Record) {
	var starts []int // the runs' first indices, and len(recs)
	for i := range recs {
		if i == 0 || recs[i].Time < recs[i-1].Time {
			starts = append(starts, i)
		}
	}
	if len(starts) <= 1 {
		return recs, scratch
	}
	starts = append(starts, len(recs))
	src, dst := recs, slicesGrow(scratch, len(recs))
	for len(starts) > 2 {
		next := starts[:0:0]
		for k := 0; k+1 < len(starts); k += 2 {
			lo := starts[k]
			if k+2 >= len(starts) {
				// An odd run out: copied as it is.
				copy(dst[lo:], src[lo:])
				next = append(next, lo)
				break
			}
			mergeRuns(dst[lo:starts[k+2]], src[lo:starts[k+1]], src[starts[k+1]:starts[k+2]])
			next = append(next, lo)
		}
		next = append(next, len(recs))
		starts = next
		src, dst = dst, src
	}
	clear(dst) // the sorted copy owns the records' buffers now
	return src, dst[:0]
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

// slicesGrow returns buf with length n, reallocated when too small.
func slicesGrow(buf []perf.Record, n int) []perf.Record {
	if cap(buf) < n {
		return make([]perf.Record, n)
	}
	return buf[:n]
}

package record

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"trueprof/internal/perf"
)

// TestSortByTime checks the run-merging sort against slices.SortStableFunc
// on records in runs (as the loop's are), in random order, already sorted
// and empty, equal times included, with and without a sorted prefix of
// kept records: same order, the ties' included.
func TestSortByTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	runs := func(sizes ...int) []perf.Record {
		var recs []perf.Record
		for _, n := range sizes {
			tm := uint64(rng.IntN(50))
			for range n {
				tm += uint64(rng.IntN(3)) // ties within and across runs
				recs = append(recs, perf.Record{Time: tm})
			}
		}
		return recs
	}
	random := make([]perf.Record, 1000)
	for i := range random {
		random[i].Time = uint64(rng.IntN(100))
	}
	for _, tc := range []struct {
		name   string
		recs   []perf.Record
		sorted int
	}{
		{"empty", nil, 0},
		{"sorted", runs(100), 0},
		{"sorted, kept", runs(100), 60},
		{"two runs", runs(100, 80), 0},
		{"five runs", runs(30, 100, 1, 70, 40), 0},
		{"kept, four runs", runs(30, 100, 1, 70, 40), 30},
		{"all kept", runs(100), 100},
		{"random", random, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.recs {
				tc.recs[i].TID = uint32(i) // the input order, to check stability
			}
			want := slices.Clone(tc.recs)
			slices.SortStableFunc(want, func(a, b perf.Record) int { return cmp.Compare(a.Time, b.Time) })
			got := tc.recs
			spare := sortByTime(got, tc.sorted, make([]perf.Record, 0, 4))
			if len(got) != len(want) {
				t.Fatalf("%d records, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].Time != want[i].Time || got[i].TID != want[i].TID {
					t.Fatalf("record %d: time %d (input %d), want time %d (input %d)", i, got[i].Time, got[i].TID, want[i].Time, want[i].TID)
				}
			}
			if len(spare) != 0 {
				t.Errorf("spare buffer of %d records, want it empty", len(spare))
			}
		})
	}
}

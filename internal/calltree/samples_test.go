package calltree

import (
	"reflect"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// TestBuildSamples: the one pass of BuildSamples, on one replay or split
// between shards, gives Build's Result and GroupMatched's Samples.
func TestBuildSamples(t *testing.T) {
	inputs := profileInputs(100, 7, modeltest.InstrFixture(), modeltest.GoFixture(), modeltest.Fixture())
	filters := []model.Filter{{}, {Thread: "t1"}, {TID: 11, HasTID: true}}
	compared := 0
	for _, in := range inputs {
		for _, f := range filters {
			for _, byGoroutine := range []bool{false, true} {
				o := Options{Filter: modeltest.Matcher(t, f), ByGoroutine: byGoroutine}
				want, err := Build(in.p, o)
				if err != nil {
					continue // a C program by goroutine
				}
				wantSamples := GroupMatched(in.p, o.Filter, byGoroutine)
				for _, shards := range []int{1, 2} {
					if shards > 1 && byGoroutine {
						continue // a goroutine moves between threads: shardsFor
					}
					a, err := analyse(in.p, o, false, shards, true)
					if err != nil {
						t.Fatalf("%s %+v: %v", in.name, f, err)
					}
					if got := a.result(); !reflect.DeepEqual(got, want) {
						t.Errorf("%s %+v by goroutine %v, %d shards: Result differs from Build's", in.name, f, byGoroutine, shards)
					}
					if got := a.g.finish(); !reflect.DeepEqual(got, wantSamples) {
						t.Errorf("%s %+v by goroutine %v, %d shards: Samples\n%+v\nGroupMatched's\n%+v", in.name, f, byGoroutine, shards, got, wantSamples)
					}
					compared++
				}
			}
		}
	}
	if compared < 800 {
		t.Errorf("only %d comparisons", compared)
	}
}

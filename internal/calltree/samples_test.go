package calltree

import (
	"fmt"
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
					if got := a.result(); !sameResult(t, got, want) {
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

// TestSampleStacksPastMemo samples more distinct stacks than a replay
// keeps the functions of (maxStacks), each below main: the first ones
// again after the memo is full, and stacks past it twice. Every sample
// lands in its function's node under main, as GroupSamples counts it.
func TestSampleStacksPastMemo(t *testing.T) {
	b := modeltest.New().Thread(1, 1, "app")
	n := maxStacks + 100
	for i := range n {
		b.Add(1, 1, fmt.Sprintf("main;f%d", i), 1)
	}
	for i := range 10 {
		b.Add(1, 1, fmt.Sprintf("main;f%d", i), 2)
		b.Add(1, 1, fmt.Sprintf("main;f%d", n-1-i), 2)
	}
	p := b.Profile()
	res, err := Build(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	for _, s := range GroupSamples(p, model.Filter{}, false).Stacks {
		want[s.Funcs[len(s.Funcs)-1].Name] += s.Samples
	}
	main := res.Processes[0].Threads[0].Root.Children[0]
	if main.Name != "main" || len(main.Children) != n {
		t.Fatalf("%s has %d children, want main with %d", main.Name, len(main.Children), n)
	}
	for _, c := range main.Children {
		if c.Base.Samples != want[c.Name] || len(c.Children) > 0 {
			t.Errorf("%s: %d samples, %d children; want %d samples, none", c.Name, c.Base.Samples, len(c.Children), want[c.Name])
		}
	}
	if want["f0"] != 3 || want[fmt.Sprintf("f%d", n-1)] != 3 {
		t.Errorf("grouped f0 %d, f%d %d times: want 3 each", want["f0"], n-1, want[fmt.Sprintf("f%d", n-1)])
	}
}

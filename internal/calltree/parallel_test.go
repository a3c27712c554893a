package calltree

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// TestShardsSameResult checks that replaying the threads in parallel
// shards gives the Result, callflows included, of one replay, bit for
// bit: over random instrumented and sampled recordings of several threads
// and the golden fixtures, with every filter and option that changes the
// replay.
func TestShardsSameResult(t *testing.T) {
	type input struct {
		name string
		p    *model.Profile
	}
	inputs := []input{{"InstrFixture", modeltest.InstrFixture()}, {"Fixture", modeltest.Fixture()}}
	for seed := range uint64(200) {
		inputs = append(inputs,
			input{fmt.Sprintf("RandomHooks %d", seed), modeltest.RandomHooks(rand.New(rand.NewPCG(seed, 3)), seed%2 == 0)},
			input{fmt.Sprintf("RandomSamples %d", seed), modeltest.RandomSamples(rand.New(rand.NewPCG(seed, 4)))})
	}
	opts := []Options{{}, {Raw: true}, {Root: "b"}, {ExcludeInterrupts: true}, {Thread: "t1"}, {PID: 10, HasPID: true}}
	compared := 0
	for _, in := range inputs {
		for _, o := range opts {
			o.Flow = true
			one, err := analyse(in.p, o, true, 1)
			if err != nil {
				continue // e.g. a root that is not in this profile
			}
			want := one.result()
			for _, shards := range []int{2, 3} {
				a, err := analyse(in.p, o, true, shards)
				if err != nil {
					t.Fatalf("%s %+v: %d shards: %v", in.name, o, shards, err)
				}
				if got := a.result(); !reflect.DeepEqual(got, want) {
					t.Errorf("%s %+v: %d shards give\n%+v\none replay\n%+v", in.name, o, shards, got, want)
				}
				compared++
			}
		}
	}
	if compared < 1000 {
		t.Errorf("only %d comparisons: the inputs lost their threads", compared)
	}
}

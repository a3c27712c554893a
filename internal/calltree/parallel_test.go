package calltree

import (
	"fmt"
	"math/rand/v2"
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
	inputs := profileInputs(200, 3, modeltest.InstrFixture(), modeltest.Fixture())
	opts := []Options{{}, {Raw: true}, {Root: "b"}, {ExcludeInterrupts: true}, {Filter: modeltest.Matcher(t, model.Filter{Thread: "t1"})},
		{Filter: modeltest.Matcher(t, model.Filter{PID: 10, HasPID: true})}}
	compared := 0
	for _, in := range inputs {
		for _, o := range opts {
			o.Flow = true
			one, err := analyse(in.p, o, true, 1, false)
			if err != nil {
				continue // e.g. a root that is not in this profile
			}
			want := one.result()
			for _, shards := range []int{2, 3} {
				a, err := analyse(in.p, o, true, shards, false)
				if err != nil {
					t.Fatalf("%s %+v: %d shards: %v", in.name, o, shards, err)
				}
				if got := a.result(); !sameResult(t, got, want) {
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

// profileInput is a recording the equivalence tests analyse two ways.
type profileInput struct {
	name string
	p    *model.Profile
}

// profileInputs returns fixtures (named by their place) and n random
// instrumented and n random sampled recordings of several threads, the
// first seeded with salt and the second with salt+1.
func profileInputs(n, salt uint64, fixtures ...*model.Profile) []profileInput {
	var inputs []profileInput
	for i, p := range fixtures {
		inputs = append(inputs, profileInput{fmt.Sprintf("fixture %d", i), p})
	}
	for seed := range n {
		hooks := modeltest.RandomHooks(rand.New(rand.NewPCG(seed, salt)), seed%2 == 0)
		inputs = append(inputs,
			profileInput{fmt.Sprintf("RandomHooks %d", seed), hooks},
			profileInput{fmt.Sprintf("RandomSamples %d", seed), modeltest.RandomSamples(rand.New(rand.NewPCG(seed, salt+1)))})
		if seed%4 == 0 {
			inputs = append(inputs, profileInput{fmt.Sprintf("RandomHooks %d, lossy", seed), lossy(hooks, rand.New(rand.NewPCG(seed, salt+2)))})
		}
	}
	return inputs
}

// lossy is a copy of p whose kernel lost records: a third of its
// switch-outs, the rest of its switches spread over two CPUs, so that
// the replay bounds the lost switch-outs by the next switch-in of
// another thread on the CPU (switchbounds.go).
func lossy(p *model.Profile, r *rand.Rand) *model.Profile {
	q := *p
	q.Lost.Kernel = 1
	q.Switches = nil
	for _, s := range p.Switches {
		if s.Out && r.IntN(3) == 0 {
			continue
		}
		s.CPU = uint32(r.IntN(2))
		q.Switches = append(q.Switches, s)
	}
	return &q
}

package modeltest

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"trueprof/internal/instr/instrtest"
	"trueprof/internal/model"
	"trueprof/internal/report/reporttest"
)

// TestSameAsOldBuilders proves that modeltest builds exactly the profiles
// of the two builders it replaces, so that the golden files made from
// them stay valid: the fixtures of the golden files, and random profiles
// that use every token of a script and every kind of stack.
func TestSameAsOldBuilders(t *testing.T) {
	cases := []struct {
		name     string
		old, new func() *model.Profile
	}{
		{"Fixture", reporttest.Fixture, Fixture},
		{"InstrFixture", reporttest.InstrFixture, InstrFixture},
		{"GoFixture", reporttest.GoFixture, GoFixture},
		{"script", func() *model.Profile {
			return instrtest.New().Thread(1, 1, "app").Thread(1, 1, "again").
				Run(1, 1, "0 +main 10 +f 12 s:main;f>g@/lib/x.so 30 -f 45 -main exit").Profile()
		}, func() *model.Profile {
			return NewHooks().Thread(1, 1, "app").Thread(1, 1, "again").
				Run(1, 1, "0 +main 10 +f 12 s:main;f>g@/lib/x.so 30 -f 45 -main exit").Profile()
		}},
		{"stacks", func() *model.Profile {
			return reporttest.New().Thread(1, 1, "app").Thread(1, 2, "w").Add(1, 1, "main;f>g@/lib/x.so", 2).
				AddTruncated(1, 2, "f", 1).Add(1, 2, "", 1).Profile()
		}, func() *model.Profile {
			return New().Thread(1, 1, "app").Thread(1, 2, "w").Add(1, 1, "main;f>g@/lib/x.so", 2).
				AddTruncated(1, 2, "f", 1).Add(1, 2, "", 1).Profile()
		}},
	}
	for seed := range uint64(300) {
		cases = append(cases, struct {
			name     string
			old, new func() *model.Profile
		}{"RandomHooks", func() *model.Profile { return instrtest.Random(rand.New(rand.NewPCG(seed, 1)), seed%2 == 0) },
			func() *model.Profile { return RandomHooks(rand.New(rand.NewPCG(seed, 1)), seed%2 == 0) }},
			struct {
				name     string
				old, new func() *model.Profile
			}{"RandomSamples", func() *model.Profile { return reporttest.Random(rand.New(rand.NewPCG(seed, 2))) },
				func() *model.Profile { return RandomSamples(rand.New(rand.NewPCG(seed, 2))) }})
	}
	for i, c := range cases {
		if old, new := c.old(), c.new(); !reflect.DeepEqual(old, new) {
			t.Errorf("case %d (%s): modeltest built\n%+v\nthe old builder\n%+v", i, c.name, new, old)
		}
	}
}

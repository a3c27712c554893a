package calltree_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// fuzzProfile turns bytes into an instrumented profile: each 3-byte group
// is one record of one of three threads, with any location id (valid or
// not), so that exits rarely match and every repair path runs.
func fuzzProfile(data []byte) *model.Profile {
	b := modeltest.NewHooks().Thread(1, 1, "a").ThreadAt(1, 2, "b", 0).ThreadAt(1, 2, "b2", 500).Calibrate(3, 2.5, 1, 7)
	for _, f := range []string{"f", "g", "h"} {
		b.Function(f)
	}
	b.Run(1, 1, "0 s:f;g;x")
	p := b.Profile()
	var now uint64
	for i := 0; i+2 < len(data); i += 3 {
		op, arg, dt := data[i], uint32(data[i+1]), uint64(data[i+2])
		now += dt
		tid := uint32(1 + op%3)
		switch op / 3 % 8 {
		case 0, 1:
			p.Events = append(p.Events, model.Event{Time: now, PID: 1, TID: tid, Entry: op/3%6 == 0, Function: arg % 6})
		case 2:
			p.Switches = append(p.Switches, model.Switch{Time: now, PID: 1, TID: tid, Out: arg%3 != 0, Preempt: arg%3 == 2})
		case 3:
			p.Adjusts = append(p.Adjusts, model.Adjust{Time: now, PID: 1, TID: tid, Duration: uint64(arg), Dropped: uint64(arg % 2)})
		case 4:
			p.Samples = append(p.Samples, model.Sample{Time: now, PID: 1, TID: tid, Stack: arg % 6})
		case 5:
			p.Events = append(p.Events, model.Event{Time: now, PID: 1, TID: tid, Entry: arg%2 == 0, Function: 1 + arg%3})
		case 6:
			p.IRQs = append(p.IRQs, model.IRQ{Time: now, PID: 1, TID: tid, Soft: arg%2 == 0, Duration: uint64(arg)})
		case 7:
			p.GoIDs = append(p.GoIDs, model.GoID{Time: now, PID: 1, TID: tid, GoID: uint64(arg % 4)})
		}
	}
	slices.SortStableFunc(p.Samples, func(x, y model.Sample) int { return cmp.Compare(x.Time, y.Time) })
	return p
}

func FuzzBuild(f *testing.F) {
	f.Add([]byte{0, 1, 5, 0, 2, 5, 3, 1, 5, 3, 2, 5})
	f.Add([]byte{15, 1, 10, 15, 2, 3, 16, 0, 4, 9, 200, 1, 6, 1, 9, 12, 0, 1, 3, 3, 3})
	f.Add([]byte{0, 1, 1, 1, 2, 1, 2, 3, 1, 4, 4, 1, 5, 5, 1, 6, 6, 1, 7, 7, 1, 8, 8, 1})
	// A goroutine taken by another thread without a switch away from the
	// first, which then has a profiler pause.
	f.Add([]byte("00\xcd00x.0\xc3_00\xef10710000\"00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := fuzzProfile(data)
		if len(p.Events) == 0 {
			return
		}
		for _, o := range []calltree.Options{{}, {Raw: true}, {ExcludeInterrupts: true}, {ByGoroutine: true}} {
			if o.ByGoroutine && len(p.GoIDs) == 0 {
				continue
			}
			r, err := calltree.Build(p, o)
			if err != nil {
				t.Fatal(err)
			}
			checkTree(t, "fuzz", p, r, o)
			checkFunctions(t, "fuzz", r)
			checkCallflow(t, "fuzz", p, r, o)
			if _, err := json.Marshal(r); err != nil {
				t.Fatal(err)
			}
		}
		checkLifetimes(t, "fuzz", p)
		if _, err := calltree.Build(p, calltree.Options{Root: "g"}); err != nil && !errors.Is(err, calltree.ErrRootNotFound) {
			t.Fatal(err)
		}
	})
}

package record

import (
	"os"

	"path/filepath"
	"strconv"
	"testing"
	"trueprof/internal/calltree"
	"trueprof/internal/model"

	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// TestHookSizeLimit records 12,000,002 events of the dense load with
// --size 2M in normal and wrap mode: the trace stays within 2.2 MB and
// every event is kept, counted as lost by the limit, or counted as
// dropped.
func TestHookSizeLimit(t *testing.T) {
	const mids = 2_000_000
	const limit = 2 << 20
	bin := testutil.BuildC(t, t.TempDir(), "calls", testutil.CallsC, "-O1", "-fno-inline", "-finstrument-functions")
	for _, mode := range []trace.Mode{trace.ModeNormal, trace.ModeWrap} {
		t.Run(string(mode), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "trueprof.trace")
			_, p := recordCmd(t, Config{Command: []string{bin, strconv.Itoa(mids)}, Mech: "hook", NoSampling: true,
				Mode: mode, SizeLimit: limit, Output: out})
			st, err := os.Stat(out)
			if err != nil {
				t.Fatal(err)
			}
			var dropped uint64
			for _, a := range p.Adjusts {
				dropped += a.Dropped
			}
			lost := p.Lost.Size + p.Lost.Wrap
			total := uint64(6*mids + 2)
			t.Logf("%s: %d bytes, %d events kept, lost by size %d, by wrap %d, dropped %d",
				mode, st.Size(), len(p.Events), p.Lost.Size, p.Lost.Wrap, dropped)
			if st.Size() > 2_200_000 {
				t.Errorf("trace of %d bytes for --size %d: want at most 2.2 MB", st.Size(), limit)
			}
			if lost == 0 {
				t.Fatal("no loss counted: the limit did not bound the events")
			}
			if (mode == trace.ModeNormal) != (p.Lost.Size > 0) || (mode == trace.ModeWrap) != (p.Lost.Wrap > 0) {
				t.Errorf("%s mode counted its loss as size %d, wrap %d", mode, p.Lost.Size, p.Lost.Wrap)
			}
			if got := uint64(len(p.Events)) + lost + dropped; got != total {
				t.Errorf("kept %d + lost %d + dropped %d = %d, want the %d events made", len(p.Events), lost, dropped, got, total)
			}
			if mode == trace.ModeWrap {
				checkWrapSuffix(t, p)
			}
		})
	}
}

// checkWrapSuffix checks that a wrapped recording of the dense load kept
// each thread's most recent events as whole calls: replayed on a shadow
// stack, the only exits without their entry are those of the calls open
// where the trace was cut (main, mid and leaf: at most 3), the last event
// kept is main's exit, and the report counts exactly those cut calls.
func checkWrapSuffix(t *testing.T, p *model.Profile) {
	t.Helper()
	stacks := map[uint32][]uint32{}
	last := map[uint32]model.Event{}
	cut := map[uint32]int{}
	for _, e := range p.Events {
		st := stacks[e.TID]
		switch {
		case e.Entry:
			st = append(st, e.Function)
		case len(st) > 0 && st[len(st)-1] == e.Function:
			st = st[:len(st)-1]
		default:
			cut[e.TID]++
		}
		stacks[e.TID], last[e.TID] = st, e
	}
	var cuts uint64
	for tid, n := range cut {
		if n > 3 {
			t.Errorf("thread %d: %d exits without their entry: want at most the 3 calls open at the cut", tid, n)
		}
		cuts += uint64(n)
	}
	for tid, e := range last {
		f := p.Locations[e.Function].Frames
		if e.Entry || len(stacks[tid]) != 0 || f[len(f)-1].Function != "main" {
			t.Errorf("thread %d: the last event kept is not main's exit, or calls are left open (%d): not the most recent events", tid, len(stacks[tid]))
		}
	}
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Repairs.Unmatched != cuts {
		t.Errorf("report counts %d unmatched exits, the trace holds %d calls cut by the wrap", r.Repairs.Unmatched, cuts)
	}
}

package record

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

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
		})
	}
}

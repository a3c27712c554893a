package record

import (
	"strings"
	"testing"

	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/testutil"
)

// hookCalTarget calls a function, sleeps for argv[1] ms, and calls it
// again.
const hookCalTarget = `
#include <stdlib.h>
#include <unistd.h>
static volatile long sink;
void f(long i) { sink += i; }
int main(int argc, char **argv) {
	f(1);
	usleep(atol(argv[1]) * 1000);
	f(2);
	return 0;
}
`

// TestHookCalibrationBursts: a hooks recording calibrated in the run
// fits the hook library's bursts (internal/hook/lib/calib.c): a process
// that exits within a second of a steady start burst runs no end burst,
// one that runs longer runs both. A start burst that was not steady (a
// loaded machine) also gets its end burst, so of three short recordings
// one at least must have fitted a single burst (all eight recordings
// beside two busy loops did). The bursts' functions stay out of the
// profile.
func TestHookCalibrationBursts(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "hookcal", hookCalTarget, "-O1", "-fno-inline", "-finstrument-functions")
	for _, c := range []struct {
		name  string
		sleep string
		runs  int
		want  int // the bursts of one run at least; none has fewer or more than 2
	}{
		{"short", "0", 3, 1},
		{"long", "1100", 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen := false
			for range c.runs {
				_, p := recordCmd(t, Config{Command: []string{bin, c.sleep}, Mech: MechHook, NoSampling: true, CalibrateInRun: true})
				cal := p.Header.Calibration
				if cal == nil || cal.Source != "in-run" {
					t.Fatalf("calibration %+v: want an in-run one", cal)
				}
				t.Logf("%d bursts, %.1f ns a call, refused %q", cal.Bursts, cal.PerCall, cal.Refused)
				if cal.Bursts < c.want || cal.Bursts > 2 {
					t.Errorf("%d bursts: want %d to 2", cal.Bursts, c.want)
				}
				seen = seen || cal.Bursts == c.want
				calls := map[string]int{}
				for _, e := range p.Events {
					if e.Entry {
						calls[p.Locations[e.Function].Symbol()]++
					}
				}
				for name := range calls {
					if strings.HasPrefix(name, calfit.Prefix) {
						t.Errorf("calibration function %s in the profile", name)
					}
				}
				if calls["f"] != 2 || calls["main"] != 1 {
					t.Errorf("calls %v: want main once and f twice", calls)
				}
			}
			if !seen {
				t.Errorf("none of %d recordings fitted %d bursts", c.runs, c.want)
			}
		})
	}
}

package uprobe

import (
	"cmp"
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/symbolize"
	"trueprof/internal/testutil"
)

// TestGoroutines follows the goroutines of a running Go program and
// checks every switch it reports against the goroutine ids and threads
// the program prints.
func TestGoroutines(t *testing.T) {
	requireUprobes(t)
	var g *Goroutines
	var switches []testutil.GoSwitch
	pid := 0
	out := runFixture(t, testutil.GoroutineFixture, func(p int, bin string, layout symbolize.GoLayout) (ring *ring, err error) {
		pid = p
		g, err = AttachGoroutines(pid, bin, layout)
		if err != nil {
			return nil, err
		}
		return &g.ring, nil
	}, func() {
		g.Read(func(s GoSwitch) {
			if s.PID != uint32(pid) {
				t.Errorf("switch of pid %d", s.PID)
			}
			switches = append(switches, testutil.GoSwitch{Time: s.Time, TID: s.TID, GoID: s.GoID})
		})
	})
	defer g.Close()
	if g.Functions[0] != "runtime.execute" {
		t.Errorf("probed %v", g.Functions)
	}
	if n := g.Lost(); n > 0 {
		t.Errorf("%d switches lost", n)
	}
	slices.SortStableFunc(switches, func(a, b testutil.GoSwitch) int { return cmp.Compare(a.Time, b.Time) })
	testutil.CheckGoroutineFixture(t, out, switches)
}

// runFixture builds the Go program src, starts it waiting on its
// standard input, calls attach with its pid, binary and layout, lets it
// run, and calls read every 20 ms and after it exits, while the ring
// attach returns is readable or not. It returns what the program
// printed.
func runFixture(t *testing.T, src string, attach func(pid int, bin string, layout symbolize.GoLayout) (*ring, error), read func()) []byte {
	t.Helper()
	bin := testutil.BuildGo(t, t.TempDir(), "fixture", src)
	layout, err := symbolize.ReadGoLayout(bin)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GOROUTINE_FIXTURE_WAIT=1")
	in, out := testutil.StartGated(t, cmd, bin)
	r, err := attach(cmd.Process.Pid, bin, layout)
	if err != nil {
		t.Fatal(err)
	}
	p, err := perf.NewPoller(r.Fds())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan error, 1)
	in.Write([]byte{1})
	go func() { done <- cmd.Wait() }()
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		case <-time.After(20 * time.Millisecond):
		}
		p.Wait(0)
		read()
	}
	return out.Bytes()
}

// TestGoroutinesNeedExecute refuses a binary without runtime.execute.
func TestGoroutinesNeedExecute(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "c", "int main(void) { return 0; }\n")
	_, err := goSites(bin, symbolize.GoLayout{GoID: 152, CoroG: -1, CoroArg: -1})
	if !errors.Is(err, ErrNoMatch) {
		t.Errorf("C binary: %v, want ErrNoMatch", err)
	}
}

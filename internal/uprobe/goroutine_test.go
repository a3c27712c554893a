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
	bin := testutil.BuildGo(t, t.TempDir(), "gofix", testutil.GoroutineFixture)
	layout, err := symbolize.ReadGoLayout(bin)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GOROUTINE_FIXTURE_WAIT=1")
	in, out := testutil.StartGated(t, cmd, bin)
	g, err := AttachGoroutines(cmd.Process.Pid, bin, layout, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Functions[0] != "runtime.execute" {
		t.Errorf("probed %v", g.Functions)
	}
	var switches []testutil.GoSwitch
	read := func() {
		g.Read(func(s GoSwitch) {
			if s.PID != uint32(cmd.Process.Pid) {
				t.Errorf("switch of pid %d", s.PID)
			}
			switches = append(switches, testutil.GoSwitch{Time: s.Time, TID: s.TID, GoID: s.GoID})
		})
	}
	p, err := perf.NewPoller(g.Fds())
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
	if n := g.Lost(); n > 0 {
		t.Errorf("%d switches lost", n)
	}
	slices.SortStableFunc(switches, func(a, b testutil.GoSwitch) int { return cmp.Compare(a.Time, b.Time) })
	testutil.CheckGoroutineFixture(t, out.Bytes(), switches)
}

// TestGoroutinesNeedExecute refuses a binary without runtime.execute.
func TestGoroutinesNeedExecute(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "c", "int main(void) { return 0; }\n")
	_, err := goSites(bin, symbolize.GoLayout{GoID: 152, CoroG: -1, CoroArg: -1})
	if !errors.Is(err, ErrNoMatch) {
		t.Errorf("C binary: %v, want ErrNoMatch", err)
	}
}

package record

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/report"
	"trueprof/internal/testutil"
)

// goFixture builds testutil.GoroutineFixture with extra go build flags.
func goFixture(t *testing.T, flags ...string) string {
	return testutil.BuildGo(t, t.TempDir(), "gofix", testutil.GoroutineFixture, flags...)
}

// switches returns a recording's goroutine switches, in time order.
func switches(p *model.Profile) []testutil.GoSwitch {
	var out []testutil.GoSwitch
	for _, g := range p.GoIDs {
		out = append(out, testutil.GoSwitch{Time: g.Time, TID: g.TID, GoID: g.GoID})
	}
	return out
}

// recordGoFixture records the fixture with cfg and checks the goroutine
// switches against what it printed; it returns the profile, the
// switches and the workers' goroutine ids.
func recordGoFixture(t *testing.T, cfg Config) (*model.Profile, []testutil.GoSwitch, []uint64) {
	t.Helper()
	var out bytes.Buffer
	cfg.Stdout = &out
	_, p := recordCmd(t, cfg)
	sw := switches(p)
	return p, sw, testutil.CheckGoroutineFixture(t, out.Bytes(), sw)
}

// TestGoroutinesSampling samples the fixture: the samples in main.spin
// belong to the worker goroutines that call it, whichever thread ran them.
func TestGoroutinesSampling(t *testing.T) {
	bin := goFixture(t)
	p, sw, workers := recordGoFixture(t, Config{Command: []string{bin}})
	perWorker := map[uint64]int{}
	spin, other := 0, 0
	for _, s := range p.Samples {
		if !slices.Contains(stackNames(p, s), "main.spin") {
			continue
		}
		spin++
		g := testutil.GoroutineAt(sw, s.TID, s.Time)
		if slices.Contains(workers, g) {
			perWorker[g]++
		} else {
			other++
		}
	}
	t.Logf("%d samples in main.spin: %v per worker goroutine, %d elsewhere", spin, perWorker, other)
	if spin < 50 || other > spin/50 {
		t.Errorf("%d of %d samples in main.spin are not given to a worker goroutine", other, spin)
	}
	if len(perWorker) != len(workers) {
		t.Errorf("samples of %d workers, want %d", len(perWorker), len(workers))
	}
}

// TestGoroutinesUprobes counts the fixture's calls of main.spin per
// goroutine with uprobes: each worker makes exactly its rounds.
func TestGoroutinesUprobes(t *testing.T) {
	bin := goFixture(t)
	p, sw, workers := recordGoFixture(t, Config{Command: []string{bin}, Trace: []string{"main.spin"}, NoSampling: true})
	calls := map[uint64]int{}
	for _, e := range p.Events {
		if e.Entry {
			calls[testutil.GoroutineAt(sw, e.TID, e.Time)]++
		}
	}
	for _, g := range workers {
		if calls[g] != testutil.GoroutineFixtureRounds {
			t.Errorf("goroutine %d: %d calls of main.spin, want %d (calls per goroutine: %v)", g, calls[g], testutil.GoroutineFixtureRounds, calls)
		}
	}
	if len(calls) != len(workers) {
		t.Errorf("calls per goroutine %v, want only the workers %v", calls, workers)
	}
}

// TestGoroutinesUprobeTree probes every main.* function of the fixture,
// whose worker goroutines block, sleep and yield inside their probed
// function and come back on another thread: by goroutine, which the call
// views default to, every call has its exit; by thread, calls are left
// open on one thread and exits match nothing on another.
func TestGoroutinesUprobeTree(t *testing.T) {
	bin := goFixture(t)
	p, _, _ := recordGoFixture(t, Config{Command: []string{bin}, Trace: []string{"main.*"}, NoSampling: true})
	by := func(goroutine bool) calltree.Repairs {
		res, err := calltree.Build(p, calltree.Options{ByGoroutine: goroutine})
		if err != nil {
			t.Fatal(err)
		}
		return res.Repairs
	}
	thread, goroutine := by(false), by(true)
	t.Logf("repairs by thread %+v, by goroutine %+v", thread, goroutine)
	// By goroutine, none but (rarely, at load) one next to a goroutine
	// switch, whose record comes from another ring than the events.
	if g := goroutine.Popped + goroutine.Unmatched; g > 2 || g >= thread.Popped+thread.Unmatched {
		t.Errorf("by goroutine: repairs %+v, want none (by thread %+v)", goroutine, thread)
	}
	if thread.Unmatched == 0 {
		t.Errorf("by thread: no exit on another thread than its call's (%+v): the goroutines did not move", thread)
	}
	var out bytes.Buffer
	if err := report.Write(&out, p, report.Options{View: "flat", Format: "text"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "By:         goroutine") {
		t.Errorf("the flat view is not by goroutine by default:\n%s", out.String())
	}
}

// TestGoroutinesRootSleepers expands --root main.worker through
// time.Sleep into the runtime (testutil.SleepersGo): the functions that
// switch goroutines (runtime.mcall) stay unprobed, so every call has its
// exit, and the counts are the program's design. Probed, mcall's
// 643-693 calls had no exit, and the goroutines' later calls nested
// under them.
func TestGoroutinesRootSleepers(t *testing.T) {
	bin := testutil.BuildGo(t, t.TempDir(), "sleepers", testutil.SleepersGo)
	_, p := recordCmd(t, Config{Command: []string{bin}, Root: "main.worker", NoSampling: true, Stdout: io.Discard})
	res, err := calltree.Build(p, calltree.Options{ByGoroutine: true, Root: "main.worker"})
	if err != nil {
		t.Fatal(err)
	}
	// A few events next to a goroutine switch can fall to the goroutine
	// before or after it: the switches come from another ring than the
	// probes' events (a CI run at load: 8 popped and 7 unmatched of
	// 360,000 events). mcall probed, hundreds of calls had no exit.
	if r := res.Repairs; r.Popped+r.Unmatched+r.Unclosed > 40 {
		t.Errorf("repairs %+v, want at most a few next to goroutine switches", r)
	}
	calls := map[string]uint64{}
	for _, f := range res.Functions {
		calls[f.Name] = f.Calls
	}
	if calls["main.worker"] != 8 || calls["main.mid"] != 16000 || calls["main.leaf"] != 160000 || calls["time.Sleep"] != 320 {
		t.Errorf("calls %v, want worker 8, mid 16000, leaf 160000, time.Sleep 320", calls)
	}
	if calls["runtime.mcall"] != 0 {
		t.Errorf("runtime.mcall probed: %d calls", calls["runtime.mcall"])
	}
}

// TestGoroutinesAttached attaches to the running fixture before it
// starts its goroutines.
func TestGoroutinesAttached(t *testing.T) {
	testutil.RequirePerf(t)
	bin := goFixture(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GOROUTINE_FIXTURE_WAIT=1")
	in, out := testutil.StartGated(t, cmd, bin)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Recording has attached well before this.
	time.AfterFunc(time.Second, func() { in.Write([]byte{1}) })
	_, p := recordCmd(t, Config{PID: cmd.Process.Pid})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testutil.CheckGoroutineFixture(t, out.Bytes(), switches(p))
}

// TestGoroutinesOff checks the two ways to record without goroutines: by
// asking, and with a binary that has no DWARF, which is said once.
func TestGoroutinesOff(t *testing.T) {
	bin := goFixture(t)
	_, p := recordCmd(t, Config{Command: []string{bin}, NoGoroutines: true, Stdout: &bytes.Buffer{}})
	if len(p.GoIDs) != 0 {
		t.Errorf("NoGoroutines: %d switches recorded", len(p.GoIDs))
	}
	log := &logBuffer{t: t}
	noDWARF := goFixture(t, "-ldflags=-w")
	_, p = recordCmd(t, Config{Command: []string{noDWARF}, Log: log, Stdout: &bytes.Buffer{}})
	if len(p.GoIDs) != 0 || len(p.Samples) == 0 {
		t.Errorf("no DWARF: %d switches, %d samples", len(p.GoIDs), len(p.Samples))
	}
	if n := strings.Count(log.String(), "goroutines not recorded"); n != 1 || !strings.Contains(log.String(), "-ldflags=-w") {
		t.Errorf("no DWARF: the warning was said %d times: %q", n, log.String())
	}
}

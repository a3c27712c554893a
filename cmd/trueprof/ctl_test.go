package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/control"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// ctlEnv runs trueprof commands with their own control directory, so
// that recordings of other tests (or other users of the machine) are not
// sessions of this one.
func ctlEnv(t *testing.T) []string {
	xdg := t.TempDir()
	if err := os.Chmod(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "XDG_RUNTIME_DIR="+xdg)
}

// ctl runs trueprof ctl ARGS and returns its standard output.
func ctl(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(trueprof(), append([]string{"ctl"}, args...)...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("ctl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// ctlStatus returns the session's status.
func ctlStatus(t *testing.T, env []string) control.Status {
	t.Helper()
	out, err := ctl(t, env, "status", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status %q: %v", out, err)
	}
	return st
}

// ctlRecord starts trueprof record -o out -- command in env and waits
// for its session; it returns the recorder, its standard error and when
// it was started.
func ctlRecord(t *testing.T, env []string, out string, command ...string) (*exec.Cmd, *strings.Builder, time.Time) {
	t.Helper()
	rec := exec.Command(trueprof(), append([]string{"record", "-o", out, "--"}, command...)...)
	rec.Env = env
	stderr := &strings.Builder{}
	rec.Stderr = stderr
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rec.Process.Kill()
		rec.Wait()
		t.Logf("record: %s", stderr.String())
	})
	// The session appears once record has calibrated (the first time on
	// a machine, several seconds) and launched the target.
	started := time.Now()
	for {
		if _, err := ctl(t, env, "status"); err == nil {
			return rec, stderr, started
		} else if time.Since(started) > 2*time.Minute {
			t.Fatalf("no session after two minutes: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nodeTotals flattens a trace's call trees: calls and raw cum wall time
// by thread and call path.
func nodeTotals(t *testing.T, path string) map[string][2]float64 {
	t.Helper()
	p, err := model.Open(path)
	if err != nil || p.Err != nil {
		t.Fatalf("%s: %v %v", path, err, p.Err)
	}
	res, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][2]float64{}
	var walk func(prefix string, n *calltree.Node)
	walk = func(prefix string, n *calltree.Node) {
		key := prefix + ";" + n.Name
		v := m[key]
		m[key] = [2]float64{v[0] + float64(n.Calls), v[1] + float64(n.Cum.WallNSRaw)}
		for i := range n.Children {
			walk(key, &n.Children[i])
		}
	}
	for _, pr := range res.Processes {
		for _, th := range pr.Threads {
			walk(fmt.Sprint(th.TID), &th.Root)
		}
	}
	return m
}

// TestCtlEndToEnd records a launched program with hooks and steers it
// with ctl: status, snapshots while it runs, a pause in which nothing is
// recorded, resume, stop. Every snapshot is a complete trace whose tree
// has, node by node, at most the final calls and time; the pause shows
// in the report.
func TestCtlEndToEnd(t *testing.T) {
	testutil.RequirePerf(t)
	env := ctlEnv(t)
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "ticker", ticker, "-pthread", "-finstrument-functions")
	out := filepath.Join(dir, "live.trace")
	rec, stderr, started := ctlRecord(t, env, out, bin, "60")
	list, err := ctl(t, env, "list")
	if err != nil || !strings.Contains(list, bin) || !strings.Contains(list, fmt.Sprint(rec.Process.Pid)) {
		t.Errorf("list: %q, %v; want the session of pid %d", list, err, rec.Process.Pid)
	}
	for st := ctlStatus(t, env); st.Events == 0; st = ctlStatus(t, env) {
		if time.Since(started) > 2*time.Minute {
			t.Fatalf("no events after two minutes: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := ctlStatus(t, env)
	if st.Mech != "hook" || st.PID == 0 || st.Output != out || st.Paused || st.Bytes == 0 {
		t.Errorf("status: %+v", st)
	}

	var snaps []string
	snapshot := func() {
		s := filepath.Join(dir, fmt.Sprintf("snap%d.trace", len(snaps)))
		if _, err := ctl(t, env, "snapshot", "-o", s); err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, s)
	}
	snapshot()
	time.Sleep(300 * time.Millisecond)
	snapshot()

	if _, err := ctl(t, env, "pause"); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl(t, env, "pause"); err == nil || !strings.Contains(err.Error(), "already paused") {
		t.Errorf("a second pause: %v, want refused", err)
	}
	// Records up to reorderSlack old are still processed after the pause
	// began; after that nothing is written.
	time.Sleep(200 * time.Millisecond)
	p1 := ctlStatus(t, env)
	time.Sleep(700 * time.Millisecond)
	p2 := ctlStatus(t, env)
	if !p2.Paused || p2.Pauses != 1 || p2.Events != p1.Events || p2.Samples != p1.Samples || p2.Dropped <= p1.Dropped {
		t.Errorf("while paused: %+v then %+v; want no new events or samples, more dropped", p1, p2)
	}
	snapshot() // taken while paused: its pause ends with it
	if _, err := ctl(t, env, "resume"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if r := ctlStatus(t, env); r.Paused || r.Events <= p2.Events || r.PausedNS < 900*time.Millisecond {
		t.Errorf("after resume: %+v; want recording again after a pause of 0.9 s or more", r)
	}
	snapshot()
	if _, err := ctl(t, env, "stop"); err != nil {
		t.Fatal(err)
	}
	rec.Wait() // the target is stopped as by Ctrl-C: its status is not ours
	if !strings.Contains(stderr.String(), "stopped: ctl") {
		t.Errorf("record did not stop for ctl: %s", stderr.String())
	}
	if _, err := ctl(t, env, "status"); err == nil {
		t.Error("the session still answers after stop")
	}

	final := nodeTotals(t, out)
	for i, s := range snaps {
		snap := nodeTotals(t, s)
		if len(snap) < 3 {
			t.Errorf("snapshot %d: %d nodes", i, len(snap))
		}
		for k, v := range snap {
			f, ok := final[k]
			if !ok || v[0] > f[0] || v[1] > f[1] {
				t.Errorf("snapshot %d: node %s has %v calls and ns, the final trace %v", i, k, v, f)
			}
		}
	}
	// No sample or event inside the pause, which every trace from the
	// third snapshot on holds.
	for _, path := range []string{snaps[2], snaps[3], out} {
		p, err := model.Open(path)
		if err != nil || p.Err != nil {
			t.Fatal(err, p.Err)
		}
		if len(p.Pauses) != 1 || p.Pauses[0].Duration < 900e6 || p.Pauses[0].Dropped == 0 {
			t.Fatalf("%s: pauses %+v, want one of 0.9 s or more with dropped events", path, p.Pauses)
		}
		from, to := p.Pauses[0].Time-p.Pauses[0].Duration, p.Pauses[0].Time
		for _, e := range p.Events {
			if e.Time >= from && e.Time < to {
				t.Fatalf("%s: an event at %d, inside the pause [%d, %d)", path, e.Time, from, to)
			}
		}
		for _, s := range p.Samples {
			if s.Time >= from && s.Time < to {
				t.Fatalf("%s: a sample inside the pause", path)
			}
		}
	}
	rep, err := exec.Command(trueprof(), "report", "-i", out, "--view", "tree").CombinedOutput()
	if err != nil || !strings.Contains(string(rep), "Paused:     1 interval, ") {
		t.Errorf("report: %v\n%s", err, rep)
	}
}

// TestCtlNoSession: with no recording, every command says so.
func TestCtlNoSession(t *testing.T) {
	env := ctlEnv(t)
	for _, args := range [][]string{{"status"}, {"pause"}, {"snapshot", "-o", filepath.Join(t.TempDir(), "x")}} {
		if _, err := ctl(t, env, args...); err == nil || !strings.Contains(err.Error(), "no recording session") {
			t.Errorf("ctl %v: %v, want no session", args, err)
		}
	}
}

// TestCtlTraceCommands records the ticker by sampling only and probes
// outer while it runs through the CLI: trace add says what it placed,
// status counts the probe, trace remove takes it off, a bad pattern and
// a second remove are refused, and the report of the trace reads it as
// an instrumented recording whose probe was placed and removed while the
// program ran.
func TestCtlTraceCommands(t *testing.T) {
	testutil.RequirePerf(t)
	env := ctlEnv(t)
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "ticker", ticker, "-pthread")
	out := filepath.Join(dir, "live.trace")
	rec, _, _ := ctlRecord(t, env, out, bin, "60")
	probe := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(trueprof(), append([]string{"ctl"}, args...)...)
		cmd.Env = env
		msg, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ctl %v: %v: %s", args, err, msg)
		}
		return string(msg)
	}
	if msg := probe("trace", "add", "outer"); !strings.Contains(msg, "probed 1 functions (2 probe sites): outer") {
		t.Errorf("trace add outer said %q", msg)
	}
	if st := ctlStatus(t, env); st.Mech != "uprobe" || st.Probes != 1 {
		t.Errorf("status after trace add: %+v", st)
	}
	if _, err := ctl(t, env, "trace", "add", "out[er"); err == nil || !strings.Contains(err.Error(), "pattern") {
		t.Errorf("trace add of a bad glob: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if msg := probe("trace", "remove", "outer"); !strings.Contains(msg, "removed 1 functions (2 probe sites): outer") {
		t.Errorf("trace remove outer said %q", msg)
	}
	if _, err := ctl(t, env, "trace", "remove", "outer"); err == nil || !strings.Contains(err.Error(), "no probed function matches") {
		t.Errorf("second trace remove: %v", err)
	}
	if _, err := ctl(t, env, "stop"); err != nil {
		t.Fatal(err)
	}
	rec.Wait()
	text, err := exec.Command(trueprof(), "report", "-i", out).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Instrument: uprobe probes", "1 removed (calls after that were not seen)", "outer"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
}

// TestCtlTraceHooks records the ticker with its -finstrument-functions
// hooks, which record every function, and filters inner out (ctl trace
// remove inner) then in again (ctl trace add inner): no event of inner
// lies between the two Probe records that say when, inner has fewer
// than its three calls per outer call but some on each side, no call
// nests in one of its own function, and root is refused.
func TestCtlTraceHooks(t *testing.T) {
	testutil.RequirePerf(t)
	env := ctlEnv(t)
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "ticker", ticker, "-pthread", "-finstrument-functions")
	out := filepath.Join(dir, "hooks.trace")
	rec, _, _ := ctlRecord(t, env, out, bin, "60")
	time.Sleep(200 * time.Millisecond)
	if _, err := ctl(t, env, "trace", "remove", "inner"); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl(t, env, "trace", "remove", "inner"); err == nil || !strings.Contains(err.Error(), "filtered out already") {
		t.Errorf("second remove: %v", err)
	}
	if _, err := ctl(t, env, "root", "outer"); err == nil || !strings.Contains(err.Error(), "a root needs uprobes") {
		t.Errorf("root on hooks: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := ctl(t, env, "trace", "add", "inner"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := ctl(t, env, "stop"); err != nil {
		t.Fatal(err)
	}
	rec.Wait() // the target is stopped as by Ctrl-C: its status is not ours
	p, err := model.Open(out)
	if err != nil || p.Err != nil {
		t.Fatalf("%s: %v %v", out, err, p.Err)
	}
	var off, on uint64
	for _, pr := range p.Probes {
		if p.Locations[pr.Function].Symbol() != "inner" {
			continue
		}
		switch pr.Mech {
		case trace.ProbeRemoved:
			off = pr.Time
		case trace.ProbeHook:
			on = pr.Time
		}
	}
	if off == 0 || on <= off {
		t.Fatalf("Probe records of inner: removed at %d, added at %d", off, on)
	}
	for _, e := range p.Events {
		if e.Time >= off && e.Time < on && p.Locations[e.Function].Symbol() == "inner" {
			t.Fatalf("an event of inner at %d, filtered out from %d to %d", e.Time, off, on)
		}
	}
	res, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A call of inner open at the removal ends then, and outer's and
	// inner's at the stop: at most 3 a thread; one entered while inner
	// was filtered out has its exit recorded, unmatched: at most one a
	// thread.
	if r := res.Repairs; r.Popped != 0 || r.Unmatched > 2 || r.Detached > 6 {
		t.Errorf("repairs %+v", r)
	}
	calls := map[string]uint64{}
	var walk func(n *calltree.Node)
	walk = func(n *calltree.Node) {
		if n.Recursion > 0 && !n.Sampled {
			t.Errorf("%s: recursion level %d", n.Name, n.Recursion)
		}
		calls[n.Name] += n.Calls
		for i := range n.Children {
			walk(&n.Children[i])
		}
	}
	for _, pr := range res.Processes {
		for _, th := range pr.Threads {
			walk(&th.Root)
		}
	}
	t.Logf("inner %d calls, outer %d", calls["inner"], calls["outer"])
	if calls["inner"] == 0 || calls["inner"]+3 > 3*calls["outer"] {
		t.Errorf("inner %d calls, outer %d: want fewer than 3 per outer call, some", calls["inner"], calls["outer"])
	}
}

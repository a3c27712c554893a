package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// startAggregated starts record --aggregate of the calls program making
// mids calls of mid (for longer than the test), in env, and waits for
// its first events. It returns the recorder, the trace path and the
// target's pid.
func startAggregated(t *testing.T, env []string, snapshot string) (*exec.Cmd, string) {
	t.Helper()
	testutil.RequirePerf(t)
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "calls", testutil.CallsC, "-O1", "-fno-inline", "-finstrument-functions")
	out := filepath.Join(dir, "agg.trace")
	rec := exec.Command(trueprof(), "record", "--aggregate", "--snapshot", snapshot, "-o", out, "--", bin, strconv.Itoa(2_000_000_000))
	rec.Env = env
	rec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the target is in its group: killed with it
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-rec.Process.Pid, syscall.SIGKILL)
		rec.Wait()
	})
	return rec, out
}

// TestAggregateSIGKILL kills an aggregated recording without warning:
// the trace still loads, with the snapshots written up to one interval
// (200 ms, plus the loop's poll) before the kill, and trees that count
// the calls made until then.
func TestAggregateSIGKILL(t *testing.T) {
	rec, out := startAggregated(t, ctlEnv(t), "200ms")
	// Calibration (the first time on a machine) and the launch come
	// first: wait for snapshots to appear in the file.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if p, err := model.Open(out); err == nil && p.Tree != nil && p.Tree.Snapshots >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshots after two minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second)
	killedAt := time.Now()
	if err := syscall.Kill(-rec.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rec.Wait()
	p, err := model.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(p.Err, model.ErrNoEnd) && !errors.Is(p.Err, trace.ErrTruncated) {
		t.Errorf("killed trace: err %v, want a missing end or truncation", p.Err)
	}
	if p.Tree == nil || !p.Aggregated() || len(p.Events) != 0 {
		t.Fatalf("killed trace: tree %v, %d events", p.Tree, len(p.Events))
	}
	lastWall := p.Header.StartTime.Add(time.Duration(p.Tree.LastNS - p.Header.StartNS))
	lost := killedAt.Sub(lastWall)
	t.Logf("%d snapshots, the last %v before SIGKILL", p.Tree.Snapshots, lost)
	if lost > 200*time.Millisecond+300*time.Millisecond {
		t.Errorf("the last %v before SIGKILL were lost (limit: one 200 ms interval and the loop's poll)", lost)
	}
	mid, leaf := midLeafCalls(t, out)
	if mid == 0 || leaf+2 < 2*mid || leaf > 2*mid {
		t.Errorf("the killed trace's trees: mid %d calls, leaf %d: want leaf twice mid (the open call aside)", mid, leaf)
	}
}

// TestAggregateCtl steers an aggregated recording with ctl: status shows
// its trees, a snapshot is a complete trace of the trees so far, reset
// starts them over, and the final trace says so and counts only the
// calls after the reset.
func TestAggregateCtl(t *testing.T) {
	env := ctlEnv(t)
	_, out := startAggregated(t, env, "100ms")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if st, err := ctl(t, env, "status", "--format", "json"); err == nil && strings.Contains(st, `"tree_nodes"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no session with trees after two minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	st := ctlStatus(t, env)
	if !st.Aggregated || st.TreeNodes < 4 || st.Events == 0 {
		t.Errorf("status %+v: want an aggregated recording with trees", st)
	}
	snap := filepath.Join(t.TempDir(), "snap.trace")
	if _, err := ctl(t, env, "snapshot", "-o", snap); err != nil {
		t.Fatal(err)
	}
	midBefore, _ := midLeafCalls(t, snap)
	if _, err := ctl(t, env, "reset"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	// Paused, the recording folds no more events: its count is final.
	if _, err := ctl(t, env, "pause"); err != nil {
		t.Fatal(err)
	}
	// The recorder folds what the target made before the pause until its
	// backlog (up to the hook spool's 2M events) is drained: the count is
	// final once it stops changing.
	beforeStop := ctlStatus(t, env)
	for settle := time.Now().Add(30 * time.Second); time.Now().Before(settle); {
		time.Sleep(300 * time.Millisecond)
		now := ctlStatus(t, env)
		if now.Events == beforeStop.Events {
			break
		}
		beforeStop = now
	}
	if beforeStop.Resets != 1 {
		t.Errorf("status after reset: %+v", beforeStop)
	}
	if _, err := ctl(t, env, "stop"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if p, err := model.Open(out); err == nil && p.End != nil {
			if p.Tree == nil || p.Tree.Resets != 1 {
				t.Fatalf("final trace: tree %+v, want one reset", p.Tree)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the recording did not end after ctl stop")
		}
		time.Sleep(100 * time.Millisecond)
	}
	midAfter, _ := midLeafCalls(t, out)
	t.Logf("mid calls: %d in the snapshot before the reset, %d after it; %d events before the snapshot, %d in all", midBefore, midAfter, st.Events, beforeStop.Events)
	if midBefore == 0 || midAfter == 0 {
		t.Errorf("mid calls %d before the reset, %d after", midBefore, midAfter)
	}
	// A mid call is six events (its own two, two leaf calls'): the trees
	// after the reset hold no more calls than the events folded after
	// the status taken before the snapshot, the calls open aside.
	if since := beforeStop.Events - st.Events; 6*midAfter > since+12 {
		t.Errorf("after the reset the trees count %d mid calls: more than the %d events folded since before the reset allow", midAfter, since)
	}
}

// midLeafCalls returns the calls of mid and of leaf in the trees of the
// calls program's trace at path, which may have been cut short.
func midLeafCalls(t *testing.T, path string) (mid, leaf uint64) {
	t.Helper()
	p, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Functions {
		switch f.Name {
		case "mid":
			mid = f.Calls
		case "leaf":
			leaf = f.Calls
		}
	}
	return mid, leaf
}

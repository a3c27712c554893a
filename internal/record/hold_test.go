package record

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/control"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
)

// shortRootFixture runs a short root on three threads: each calls root 5
// times; root calls leaf_a once and mid 10 times, mid calls leaf_b 20
// times, so a run makes 15 calls of root and leaf_a, 150 of mid and 3,000
// of leaf_b, in a few milliseconds (plain -O2, noipa keeping the calls).
// outside, called beside root, is outside its subgraph. With an argument
// it first waits until the second word of the file it names, mapped
// shared, is set: the test's gate.
const shortRootFixture = `
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
__attribute__((noipa)) long leaf_b(long i) { long s = 0; for (int k = 0; k < 200; k++) s += (i ^ k) * 3; return s; }
__attribute__((noipa)) long leaf_a(long i) { return i * 7; }
__attribute__((noipa)) long mid(long i) { long s = 0; for (int k = 0; k < 20; k++) s += leaf_b(i + k); return s; }
__attribute__((noipa)) long root(long i) { long s = leaf_a(i); for (int k = 0; k < 10; k++) s += mid(k + i); return s; }
__attribute__((noipa)) long outside(long i) { return i + 1; }
static void *run(void *arg) {
	long s = 0;
	for (int r = 0; r < 5; r++) s += root(r) + outside(r);
	*(long *)arg = s;
	return 0;
}
int main(int argc, char **argv) {
	if (argc > 1) {
		int fd = open(argv[1], O_RDWR);
		volatile long *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		while (!m[1]) usleep(1000);
	}
	pthread_t t[3];
	long out[3];
	for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, run, &out[i]);
	for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
	printf("%ld %ld %ld\n", out[0], out[1], out[2]);
	return 0;
}
`

// shortRootCalls is what one run of shortRootFixture calls.
var shortRootCalls = map[string]uint64{"root": 15, "leaf_a": 15, "mid": 150, "leaf_b": 3000}

// shortRootTarget builds shortRootFixture and returns it, its output
// unprobed, and a gate file with the function that opens it.
func shortRootTarget(t *testing.T) (bin, want, gate string, open func()) {
	dir := t.TempDir()
	bin = testutil.BuildC(t, dir, "shortroot", shortRootFixture, "-O2", "-pthread")
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	gate = filepath.Join(dir, "gate")
	if err := os.WriteFile(gate, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	open = func() {
		f, err := os.OpenFile(gate, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{1}, 8); err != nil {
			t.Fatal(err)
		}
	}
	return bin, string(out), gate, open
}

// checkHeld checks a recording of shortRootFixture under --root root:
// every call of the root's subgraph counted, as the program makes them,
// and nothing outside it; no recursive node, no negative time; the holds
// written as pauses, as many as the functions that call others (root and
// mid; a thread that the stop reached late may add one), with no event in
// them, each with an Adjust of every thread stopped at its end, at least
// as long, removed from the calls of root it fell in.
func checkHeld(t *testing.T, p *model.Profile) {
	t.Helper()
	got := entries(p)
	for fn, want := range shortRootCalls {
		if uint64(got[fn]) != want {
			t.Errorf("%s: %d calls, the program makes %d", fn, got[fn], want)
		}
	}
	if got["outside"] != 0 {
		t.Errorf("outside: %d calls recorded, outside the root's subgraph", got["outside"])
	}
	r, err := calltree.Build(p, calltree.Options{Root: "root"})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]uint64{}
	var removed float64 // pause time removed from root's calls, ns
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			if n := recursive(&th.Root, calls); n != "" {
				t.Errorf("thread %d: %s recursive", th.TID, n)
			}
			checkTimes(t, &th.Root)
			for i := range th.Root.Children {
				if n := &th.Root.Children[i]; n.Name == "root" {
					removed += float64(n.Cum.WallNSRaw) - n.Cum.WallNS
				}
			}
		}
	}
	for fn, want := range shortRootCalls {
		if calls[fn] != want {
			t.Errorf("tree: %s %d calls, want %d", fn, calls[fn], want)
		}
	}
	if rp := r.Repairs; rp.Popped != 0 || rp.Unmatched != 0 || rp.Unclosed != 0 {
		t.Errorf("repairs %+v", rp)
	}
	pauses := laterHolds(p)
	if n := len(pauses); n < 2 || n > 3 {
		t.Fatalf("%d pauses after the first call, want a hold for root and one for mid", n)
	}
	var held uint64
	for _, ps := range p.Pauses {
		held += ps.Duration
		adjusts := 0
		for _, a := range p.Adjusts {
			if a.Time == ps.Time && a.Duration >= ps.Duration {
				adjusts++
			}
		}
		for _, e := range p.Events {
			if e.Time > ps.Time-ps.Duration && e.Time < ps.Time {
				t.Errorf("an event at %d, inside the hold (%d, %d)", e.Time, ps.Time-ps.Duration, ps.Time)
				break
			}
		}
		if adjusts == 0 || adjusts > 4 {
			t.Errorf("pause of %v at %d: %d Adjust records, want one per thread stopped", time.Duration(ps.Duration), ps.Time, adjusts)
		}
	}
	// The thread that held at root's first entry was in root for all of
	// the first hold (calibration removes probe cost on top).
	if first := pauses[0].Duration; removed < float64(first) {
		t.Errorf("%v removed from root's calls, less than the first hold, %v", time.Duration(removed), time.Duration(first))
	}
	t.Logf("%d holds, %v in all", len(p.Pauses), time.Duration(held))
}

// TestRootHoldLaunched: a launched program whose root runs a few
// milliseconds on three threads has every call below the root counted,
// the first ones included (before the hold, the callees' probes came
// 30-50 ms after their caller's first entry, and none of these calls was
// seen), and its output unchanged.
func TestRootHoldLaunched(t *testing.T) {
	bin, want, _, _ := shortRootTarget(t)
	var out bytes.Buffer
	_, p := recordCmd(t, Config{Command: []string{bin}, Root: "root", NoSampling: true, Stdout: &out})
	if out.String() != want {
		t.Errorf("output %q, unprobed %q", out.String(), want)
	}
	checkHeld(t, p)
}

// TestRootHoldAttached: the same with -p, the program waiting for its
// gate until the recording counts.
func TestRootHoldAttached(t *testing.T) {
	bin, want, gate, open := shortRootTarget(t)
	cmd := exec.Command(bin, gate)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	testutil.WaitExec(t, cmd.Process.Pid, bin)
	_, wait := ctlSession(t, Config{PID: cmd.Process.Pid, Root: "root", NoSampling: true})
	open()
	p := wait()
	if err := <-exited; err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Errorf("output %q, unprobed %q", out.String(), want)
	}
	checkHeld(t, p)
}

// TestCtlRootHold: ctl root in a running sampling recording holds as
// --root does.
func TestCtlRootHold(t *testing.T) {
	p := ctlGated(t, Config{Freq: 999}, func(s control.Info) {
		if ch := ctlProbes(t, s, control.CmdRoot, "root"); ch.Count != 1 {
			t.Errorf("root: %+v", ch)
		}
	})
	checkHeld(t, p)
}

// ctlGated records shortRootFixture launched with cfg under a control
// session, runs ctl while the program waits for its gate, then lets it
// run and returns the trace, its output checked against the unprobed
// one.
func ctlGated(t *testing.T, cfg Config, ctl func(control.Info)) *model.Profile {
	t.Helper()
	bin, want, gate, open := shortRootTarget(t)
	var out bytes.Buffer
	cfg.Command, cfg.Stdout = []string{bin, gate}, &out
	s, wait := ctlSession(t, cfg)
	ctl(s)
	open()
	p := wait()
	if out.String() != want {
		t.Errorf("output %q, unprobed %q", out.String(), want)
	}
	return p
}

// TestPendingStop: a stop sent to a process held already is seen
// pending, so that resuming it after a hold leaves it stopped, and SIGCONT
// drops it.
func TestPendingStop(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	if sig := pendingStop(pid); sig != 0 {
		t.Fatalf("a running process has %v pending", sig)
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	if stopped := waitStopped(pid, 5*time.Second); len(stopped) != 1 || stopped[0] != uint32(pid) {
		t.Fatalf("stopped threads %v, want %d", stopped, pid)
	}
	if sig := pendingStop(pid); sig != 0 {
		t.Errorf("the stop that stopped it is still pending: %v", sig)
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	if sig := pendingStop(pid); sig != syscall.SIGSTOP {
		t.Errorf("pending %v after a second SIGSTOP, want SIGSTOP", sig)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	if sig := pendingStop(pid); sig != 0 {
		t.Errorf("pending %v after SIGCONT", sig)
	}
}

// TestCtlRemoveReleasesHold: a root removed with ctl trace remove while
// another function placed with it stays probed holds no more: the target
// never stops (before, every call of the removed root stopped it).
func TestCtlRemoveReleasesHold(t *testing.T) {
	p := ctlGated(t, Config{Root: "root", Trace: []string{"outside"}, NoSampling: true}, func(s control.Info) {
		if ch := ctlProbes(t, s, control.CmdTraceRemove, "root"); ch.Count != 1 {
			t.Errorf("remove root: %+v", ch)
		}
	})
	if got := entries(p); got["outside"] != 15 || got["root"] != 0 || got["mid"] != 0 {
		t.Errorf("calls %v, want outside's 15 and nothing of the removed root's subgraph", got)
	}
	if n := len(laterHolds(p)); n != 0 {
		t.Errorf("%d pauses after the first call: the removed root still held the target", n)
	}
}

// laterHolds returns the pauses that end after the first event: holds
// of functions entered, not the dynamic linker's at start (watchLoads),
// which come before the program's first call.
func laterHolds(p *model.Profile) []model.Pause {
	if len(p.Events) == 0 {
		return nil
	}
	first := p.Events[0].Time
	for _, e := range p.Events {
		first = min(first, e.Time)
	}
	var out []model.Pause
	for _, ps := range p.Pauses {
		if ps.Time > first {
			out = append(out, ps)
		}
	}
	return out
}

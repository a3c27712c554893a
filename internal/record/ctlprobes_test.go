package record

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/control"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// countedFixture calls f and g in a loop (-O2; noipa keeps both real
// calls) and counts f's calls in the first word of the file its argument
// names, mapped shared: the test reads the count while it runs, and
// stops it by writing the second word.
const countedFixture = `
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
__attribute__((noipa)) long f(long i) { return i * 3 + 1; }
__attribute__((noipa)) long g(long i) { return i ^ 5; }
int main(int argc, char **argv) {
	int fd = open(argv[1], O_RDWR);
	volatile long *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	long s = 0;
	for (long i = 0; !m[1]; i++) {
		s += f(i);
		m[0] = i + 1;
		s += g(s);
		if (i % 16 == 0) usleep(20);
	}
	return s == 42;
}
`

// treeFixture's loop calls a -> b and c -> d, b, counting its loops and
// stopping as countedFixture does.
const treeFixture = `
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
__attribute__((noipa)) long b(long i) { return i + 1; }
__attribute__((noipa)) long a(long i) { return b(i) * 2; }
__attribute__((noipa)) long d(long i) { return i - 1; }
__attribute__((noipa)) long c(long i) { return d(i) + b(i); }
int main(int argc, char **argv) {
	int fd = open(argv[1], O_RDWR);
	volatile long *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	long s = 0;
	for (long i = 0; !m[1]; i++) {
		s += a(i) + c(s);
		m[0] = i + 1;
		if (i % 16 == 0) usleep(20);
	}
	return s == 42;
}
`

// countedTarget builds src (countedFixture, treeFixture) and the file it
// counts in; count reads the count so far, stop ends the program.
func countedTarget(t *testing.T, src string) (cmd []string, count func() int64, stop func()) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "counted", src, "-O2")
	file := filepath.Join(dir, "count")
	if err := os.WriteFile(file, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	count = func() int64 {
		var b [8]byte
		if _, err := f.ReadAt(b[:], 0); err != nil {
			t.Fatal(err)
		}
		return int64(binary.LittleEndian.Uint64(b[:]))
	}
	stop = func() {
		if _, err := f.WriteAt([]byte{1}, 8); err != nil {
			t.Fatal(err)
		}
	}
	return []string{bin, file}, count, stop
}

// ctlSession runs Run(cfg) in the background with a control directory
// of its own and returns the session once the target counts; wait waits
// for the end of the recording and loads the trace.
func ctlSession(t *testing.T, cfg Config) (control.Info, func() *model.Profile) {
	testutil.RequirePerf(t)
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	cfg.Output = filepath.Join(t.TempDir(), "ctl.trace")
	if cfg.Event.Name == "" {
		cfg.Event = cpuClock(t)
	}
	cfg.Log = testWriter{t}
	started := make(chan struct{})
	cfg.started = func() { close(started) }
	done := make(chan struct{})
	var runErr error
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, runErr = Run(ctx, cfg)
		close(done)
	}()
	wait := func() *model.Profile {
		select {
		case <-done:
			if runErr != nil {
				t.Fatal(runErr)
			}
		case <-time.After(30 * time.Second):
			cancel()
			<-done
			t.Fatalf("the recording did not end: %v", runErr)
		}
		p, err := model.Open(cfg.Output)
		if err != nil || p.Err != nil {
			t.Fatalf("trace: %v, %v", err, p.Err)
		}
		return p
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	select {
	case <-started:
	case <-done:
		t.Fatalf("recording ended before it started: %v", runErr)
	}
	dir, err := control.Dir()
	if err != nil {
		t.Fatal(err)
	}
	info, err := control.Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return info, wait
}

// ctlProbes sends a probe command and returns what it changed.
func ctlProbes(t *testing.T, s control.Info, cmd, pattern string) *control.ProbeChange {
	t.Helper()
	ans, err := control.Call(s, control.Request{Cmd: cmd, Pattern: pattern}, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", cmd, pattern, err)
	}
	if ans.Probes == nil {
		t.Fatalf("%s %s: the answer says nothing of the probes: %+v", cmd, pattern, ans)
	}
	return ans.Probes
}

// ctlRefused sends a probe command that must fail with an error holding
// want.
func ctlRefused(t *testing.T, s control.Info, cmd, pattern, want string) {
	t.Helper()
	if _, err := control.Call(s, control.Request{Cmd: cmd, Pattern: pattern}, nil); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s %q: %v, want an error with %q", cmd, pattern, err, want)
	}
}

// TestCtlTraceAddRemove records a launched -O2 program by sampling only,
// probes f while it runs (ctl trace add f) and removes the probe (ctl
// trace remove f): the trace counts f's calls between the two as the
// program's own counter brackets them (the calls it made between the
// answers, and between the requests), with no recursive node, no
// negative time, and at most the one call open at the removal ended
// then. g, never probed, has no calls.
func TestCtlTraceAddRemove(t *testing.T) {
	cmd, count, stop := countedTarget(t, countedFixture)
	s, wait := ctlSession(t, Config{Command: cmd, Freq: 999})
	for count() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctlRefused(t, s, control.CmdTraceRemove, "f", "no probed function matches")
	ctlRefused(t, s, control.CmdTraceAdd, "nosuchfunction", "no function of the target's modules matches")
	ctlRefused(t, s, control.CmdTraceAdd, "f[", "pattern")
	c0 := count()
	ch := ctlProbes(t, s, control.CmdTraceAdd, "f")
	c1 := count()
	if ch.Count != 1 || len(ch.Functions) != 1 || ch.Functions[0] != "f" || ch.Sites != 2 {
		t.Errorf("trace add f placed %+v, want f at its entry and return", ch)
	}
	ctlRefused(t, s, control.CmdTraceAdd, "f", "probed already")
	time.Sleep(300 * time.Millisecond)
	c2 := count()
	ch = ctlProbes(t, s, control.CmdTraceRemove, "f")
	c3 := count()
	if ch.Count != 1 || ch.Functions[0] != "f" {
		t.Errorf("trace remove f removed %+v", ch)
	}
	time.Sleep(200 * time.Millisecond)
	stop()
	p := wait()
	if p.Header.Instrument != "" {
		t.Errorf("header says instrument %q for a recording started sampling only", p.Header.Instrument)
	}
	var placed, removed int
	for _, pr := range p.Probes {
		if name := p.Locations[pr.Function].Symbol(); name != "f" {
			t.Errorf("probe record of %s", name)
		}
		if pr.Mech == trace.ProbeRemoved {
			removed++
		} else {
			placed++
		}
	}
	if placed != 1 || removed != 1 {
		t.Errorf("%d Probe records placing f, %d removing it; want 1 and 1", placed, removed)
	}
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]uint64{}
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			recursive(&th.Root, calls)
			checkTimes(t, &th.Root)
		}
	}
	// A call of f counted by the program between the answers was
	// entered after the probe was live and returned before it came off;
	// one counted outside the requests was not traced. The program counts
	// a call after it returns: one call may straddle each edge.
	t.Logf("f: %d calls traced; program counted %d between the answers, %d between the requests", calls["f"], c2-c1, c3-c0)
	if got := int64(calls["f"]); got+1 < c2-c1 || got > c3-c0+1 || c2-c1 < 1000 {
		t.Errorf("f: %d calls traced, want between %d and %d", got, c2-c1, c3-c0)
	}
	if calls["g"] != 0 {
		t.Errorf("g, never probed, has %d calls", calls["g"])
	}
	if rp := r.Repairs; rp.Popped != 0 || rp.Unclosed != 0 || rp.Detached > 1 || rp.Unmatched > 1 {
		t.Errorf("repairs %+v: want at most the call open at the removal ended then", rp)
	}
}

// checkTimes fails on a node with a negative time or a cum below its
// base, and on a traced call nested in a call of its own function (RL >
// 0: no function here recurses). Nodes known only from samples are
// left out: their stacks may hold [unknown] twice.
func checkTimes(t *testing.T, n *calltree.Node) {
	t.Helper()
	if n.Base.WallNS < 0 || n.Cum.WallNS < 0 || n.Base.WallNSRaw > n.Cum.WallNSRaw {
		t.Errorf("%s: base %v, cum %v", n.Name, n.Base.WallNS, n.Cum.WallNS)
	}
	if n.Recursion > 0 && !n.Sampled {
		t.Errorf("%s: traced with recursion level %d", n.Name, n.Recursion)
	}
	for i := range n.Children {
		checkTimes(t, &n.Children[i])
	}
}

// TestCtlRoot sets the root function of a running sampling recording
// (ctl root a): a is probed, and b, which a calls, once a first runs;
// then replaces it (ctl root c): a and b come off, c and its callees d
// and b are probed as c runs. No event of a follows its removal, b is
// traced under a and then under c, never recursive.
func TestCtlRoot(t *testing.T) {
	cmd, count, stop := countedTarget(t, treeFixture)
	s, wait := ctlSession(t, Config{Command: cmd, Freq: 999})
	for count() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctlRefused(t, s, control.CmdRoot, "nosuchfunction", "no function of the target's modules is named")
	if ch := ctlProbes(t, s, control.CmdRoot, "a"); ch.Count != 1 || ch.Functions[0] != "a" || ch.Removed != 0 {
		t.Errorf("root a: %+v", ch)
	}
	time.Sleep(300 * time.Millisecond)
	if ch := ctlProbes(t, s, control.CmdRoot, "c"); ch.Count != 1 || ch.Functions[0] != "c" || ch.Removed != 2 {
		t.Errorf("root c: %+v, want c placed and a, b removed", ch)
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	p := wait()
	removedA := uint64(0)
	for _, pr := range p.Probes {
		if pr.Mech == trace.ProbeRemoved && p.Locations[pr.Function].Symbol() == "a" {
			removedA = pr.Time
		}
	}
	if removedA == 0 {
		t.Fatal("no Probe record says a's probe came off")
	}
	for _, e := range p.Events {
		if e.Time >= removedA && p.Locations[e.Function].Symbol() == "a" {
			t.Fatalf("an event of a at %d, after its removal at %d", e.Time, removedA)
		}
	}
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	under := map[string]uint64{} // parent/child: calls
	var walk func(parent string, n *calltree.Node)
	walk = func(parent string, n *calltree.Node) {
		under[parent+"/"+n.Name] += n.Calls
		for i := range n.Children {
			walk(n.Name, &n.Children[i])
		}
	}
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			walk("", &th.Root)
			checkTimes(t, &th.Root)
		}
	}
	t.Logf("calls of a/b %d, c/d %d, c/b %d", under["a/b"], under["c/d"], under["c/b"])
	for _, k := range []string{"a/b", "c/d", "c/b"} {
		if under[k] < 100 {
			t.Errorf("%s: %d calls, want the lazily probed callee traced", k, under[k])
		}
	}
	// a and b may be open when they come off, c and d or b when the
	// recording stops; b's probe comes back for c while a (no longer
	// traced) may be inside it, whose exit then has no entry.
	if rp := r.Repairs; rp.Popped != 0 || rp.Unclosed != 0 || rp.Detached > 4 || rp.Unmatched > 2 {
		t.Errorf("repairs %+v", rp)
	}
}

// TestCtlTraceAttached adds and removes probes five times on a running
// multi-threaded server recorded by sampling (-p): each window's calls
// nest right (no recursion, handle and work agree on each thread but
// for the calls open at an edge), and the server computes what it
// computes without probes.
func TestCtlTraceAttached(t *testing.T) {
	testutil.RequirePerf(t)
	srv, finish := startServer(t)
	s, wait := ctlSession(t, Config{PID: srv.Process.Pid, Freq: 999})
	for i := range 5 {
		// One request, so that handle and work are live from the same
		// time: placing a set takes tens of milliseconds.
		if ch := ctlProbes(t, s, control.CmdTraceAdd, "server:[hw][ao]*"); ch.Count != 2 || strings.Join(ch.Functions, " ") != "handle work" {
			t.Errorf("add %d: %+v", i, ch)
		}
		time.Sleep(100 * time.Millisecond)
		if ch := ctlProbes(t, s, control.CmdTraceRemove, "server:*"); ch.Count != 2 {
			t.Errorf("remove %d: %+v, want work and handle", i, ch)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := control.Call(s, control.Request{Cmd: control.CmdStop}, nil); err != nil {
		t.Fatal(err)
	}
	p := wait()
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	threads := 0
	for _, pr := range r.Processes {
		for _, th := range pr.Threads {
			calls := map[string]uint64{}
			recursive(&th.Root, calls)
			checkTimes(t, &th.Root)
			if calls["handle"] == 0 {
				continue
			}
			threads++
			// Each window may cut a call of handle at both edges.
			if h, w := calls["handle"], calls["work"]; h+10 < w || w+10 < h || h < 100 {
				t.Errorf("thread %d: %d calls of handle, %d of work", th.TID, h, w)
			}
		}
	}
	if threads != 3 {
		t.Errorf("calls on %d threads, want 3", threads)
	}
	// At most a call of each function per thread and window is open at
	// a removal, or at a placement.
	if rp := r.Repairs; rp.Popped != 0 || rp.Unclosed != 0 || rp.Detached > 30 || rp.Unmatched > 30 {
		t.Errorf("repairs %+v", rp)
	}
	finish()
}

// TestCtlTraceAddCalibrates: a sampling recording that gains uprobes
// (ctl trace add) is calibrated as a uprobe recording is: in the run, a
// burst when the first probes go in, with the target running, and one
// at the end, whose fit (with the site costs) is the trace's; with the
// stored calibration, the stored one for uprobes.
func TestCtlTraceAddCalibrates(t *testing.T) {
	cal := &trace.Calibration{Mechanism: "uprobe", Statistic: "fit", Source: "in-run", Bursts: 2,
		Overhead: [trace.Transitions]float64{500, 300, 400, 200}, PerCall: 700,
		Sites: &trace.SiteCosts{EntryEmulated: 500, EntryStepped: 14000, ExitReturn: 200, ExitRetInsn: 14000}}
	storedCal := *cal
	storedCal.Source, storedCal.Bursts = "", 0
	for _, inRun := range []bool{true, false} {
		t.Run(fmt.Sprintf("in-run %v", inRun), func(t *testing.T) {
			fake := &fakeUprobeCalibrator{cal: cal}
			asked := 0
			stored := func(m Mech) (*trace.Calibration, error) {
				asked++
				if m != MechUprobe || inRun {
					t.Errorf("the stored calibration of %q was asked for", m)
				}
				return &storedCal, nil
			}
			cmd, count, stop := countedTarget(t, countedFixture)
			s, wait := ctlSession(t, Config{Command: cmd, Freq: 999, CalibrateInRun: inRun, UprobeCalibration: fake, Calibration: stored})
			for count() == 0 {
				time.Sleep(time.Millisecond)
			}
			before := perf.Now()
			ctlProbes(t, s, control.CmdTraceAdd, "f")
			after := perf.Now()
			time.Sleep(100 * time.Millisecond)
			stop()
			p := wait()
			c := p.Header.Calibration
			if !inRun {
				if asked != 1 || c == nil || c.Sites == nil || *c.Sites != *storedCal.Sites || len(fake.bursts) != 0 {
					t.Fatalf("stored: asked %d times, %d bursts, calibration %+v: want the stored one", asked, len(fake.bursts), c)
				}
				return
			}
			if len(fake.bursts) != 2 || fake.bursts[0] < before || fake.bursts[0] > after {
				t.Fatalf("bursts at %v; want one during trace add (%d-%d) and one at the end", fake.bursts, before, after)
			}
			if c == nil || c.Source != "in-run" || c.Sites == nil || *c.Sites != *cal.Sites {
				t.Fatalf("trace calibration %+v: want the in-run one", c)
			}
			r, err := calltree.Build(p, calltree.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Calibration == nil || r.Calibration.Source != "in-run" {
				t.Errorf("the report's calibration %+v: want the in-run one applied", r.Calibration)
			}
		})
	}
}

package record

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// buildFixture compiles testdata/kstats/name.c.
func buildFixture(t *testing.T, name string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "kstats", name+".c"))
	if err != nil {
		t.Fatal(err)
	}
	return testutil.BuildC(t, t.TempDir(), name, string(src), "-pthread")
}

// requireIRQ fails (under TRUEPROF_REQUIRE_PERF) or skips when the
// interrupt tracepoints cannot be found.
func requireIRQ(t *testing.T) {
	t.Helper()
	testutil.RequirePerf(t)
	if _, err := perf.LookupTracepoint("irq", "softirq_entry"); err != nil {
		testutil.Missing(t, err.Error())
	}
}

// checkFaults checks the Counter records of the faults fixture's
// threads: toucher-i touched 1000*i fresh pages, main 500, and hopper
// moved between CPUs ten times.
func checkFaults(t *testing.T, p *model.Profile, pid uint32) {
	t.Helper()
	want := map[string]uint64{"toucher-1": 1000, "toucher-2": 2000, "toucher-3": 3000, "faults": 500}
	seen := map[string]bool{}
	for _, th := range p.Threads {
		if th.PID != pid {
			continue
		}
		faults, migrations := th.Counters[trace.CounterPageFaults], th.Counters[trace.CounterMigrations]
		t.Logf("thread %d %s: %d page faults, %d migrations (counters %v)", th.TID, th.Name, faults, migrations, th.Counters)
		if th.Counters == nil {
			t.Errorf("thread %d %s has no counters", th.TID, th.Name)
			continue
		}
		seen[th.Name] = true
		// Besides its pages a thread faults its stack, and the main
		// thread the dynamic loader's and libc's start-up.
		if n, ok := want[th.Name]; ok && (faults < n || faults > n+200) {
			t.Errorf("thread %s: %d page faults, want %d to %d", th.Name, faults, n, n+200)
		}
		if th.Name == "hopper" {
			if cpus, _ := perf.OnlineCPUs(); len(cpus) >= 2 && migrations < 9 {
				t.Errorf("hopper: %d migrations, want at least 9", migrations)
			}
			if faults > 200 {
				t.Errorf("hopper: %d page faults, want few", faults)
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("no counters for thread %s", name)
		}
	}
	if !seen["hopper"] {
		t.Error("no counters for thread hopper")
	}
}

// readyWriter calls cancel when the faults fixture says all its threads
// are done.
type readyWriter struct {
	mu     sync.Mutex
	out    []byte
	cancel func()
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out = append(w.out, b...)
	if strings.Contains(string(w.out), "ready\n") {
		w.cancel()
	}
	return len(b), nil
}

// TestCountersLaunched checks per-thread page faults and migrations of a
// launched target whose threads exit (the kernel's read records at their
// exit, the main thread's share of its descriptors' totals) and of one
// still running when recording stops (/proc).
func TestCountersLaunched(t *testing.T) {
	testutil.RequirePerf(t)
	bin := buildFixture(t, "faults")
	// The sample rings, where BPF is not permitted, count the same.
	for _, mode := range []string{"exit", "live", "exit-rings"} {
		t.Run(mode, func(t *testing.T) {
			if m, ok := strings.CutSuffix(mode, "-rings"); ok {
				mode, countInKernel = m, false
				defer func() { countInKernel = true }()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := Config{Command: []string{bin, mode, "now"}, Stdout: &readyWriter{cancel: func() {}}, RingPages: 1024}
			want := "exited"
			if mode == "live" {
				// Stop once the threads are done: they never end.
				cfg.Stdout, want = &readyWriter{cancel: cancel}, "signal"
			}
			res, p := recordCtx(t, ctx, cfg)
			t.Logf("result %+v lost %+v", res, p.Lost)
			if res.Reason != want {
				t.Fatalf("stopped by %q, want %q", res.Reason, want)
			}
			checkFaults(t, p, uint32(p.Threads[0].PID))
		})
	}
}

// TestCountersAttached attaches to the faults fixture before its threads
// do their work; they exit, the main thread stays. Every thread existed
// at attach, so each is the origin of its own events.
func TestCountersAttached(t *testing.T) {
	testutil.RequirePerf(t)
	bin := buildFixture(t, "faults")
	cmd := exec.Command(bin, "exit", "stdin")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd.Stdout = &readyWriter{cancel: cancel}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	// Wait for the threads to exist.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if tids, _ := threads(cmd.Process.Pid); len(tids) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fixture's threads did not start")
		}
	}
	// Let them work once the events count, and stop when they are done.
	cfg := Config{PID: cmd.Process.Pid, RingPages: 1024, started: func() { in.Write([]byte{1}) }}
	res, p := recordCtx(t, ctx, cfg)
	if res.Reason != "signal" {
		t.Fatalf("result %+v", res)
	}
	checkFaults(t, p, uint32(cmd.Process.Pid))
}

// TestInterrupts records the irqs fixture, whose threads take timer,
// network and block interrupts and softirqs, while another process runs
// the same fixture unrecorded: IRQ records are written for the target's
// threads only, with plausible durations.
func TestInterrupts(t *testing.T) {
	requireIRQ(t)
	bin := buildFixture(t, "irqs")
	dir := t.TempDir()
	other := exec.Command(bin, "1500", filepath.Join(dir, "other.dat"))
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Wait()
	res, p := recordCmd(t, Config{Command: []string{bin, "1000", filepath.Join(dir, "target.dat")}})
	if res.ExitCode != 0 || p.End == nil {
		t.Fatalf("result %+v", res)
	}
	pid := p.Threads[0].PID
	names := map[uint32]string{}
	for _, th := range p.Threads {
		names[th.TID] = th.Name
	}
	type key struct {
		name string
		soft bool
		vec  uint32
	}
	n := map[key]int{}
	var durations []uint64
	for _, irq := range p.IRQs {
		if irq.PID != pid || names[irq.TID] == "" {
			t.Errorf("IRQ of a thread that is not the target's: %+v", irq)
			continue
		}
		if int(irq.PID) == other.Process.Pid {
			t.Errorf("IRQ of the unrecorded process: %+v", irq)
		}
		if irq.Duration == 0 {
			t.Errorf("IRQ of no duration: %+v", irq)
		}
		durations = append(durations, irq.Duration)
		n[key{strings.TrimRight(names[irq.TID], "01"), irq.Soft, irq.Vector}]++
	}
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	elapsed := time.Duration(p.End.Time - p.Header.StartNS)
	t.Logf("%d IRQ records in %v (%.0f/s); by thread, soft, vector: %v", len(p.IRQs), elapsed, float64(len(p.IRQs))/elapsed.Seconds(), n)
	if len(durations) == 0 {
		t.Fatal("no IRQ records")
	}
	t.Logf("durations: median %d ns, 99th percentile %d ns, max %d ns",
		durations[len(durations)/2], durations[len(durations)*99/100], durations[len(durations)-1])
	// A vCPU the host preempts inside a handler stretches it; one in a
	// hundred may be that unlucky, none by that much.
	if d := durations[len(durations)*99/100]; d >= uint64(time.Millisecond) {
		t.Errorf("99th percentile of IRQ durations %d ns, want under 1 ms", d)
	}
	if d := durations[len(durations)-1]; d >= uint64(20*time.Millisecond) {
		t.Errorf("longest IRQ %d ns", d)
	}
	const netRX = 3
	if n[key{"udp", true, netRX}] == 0 {
		t.Error("no NET_RX softirq on the thread sending loopback datagrams")
	}
	spinners := 0
	for k, c := range n {
		if k.name == "spinner-" {
			spinners += c
		}
	}
	if spinners == 0 {
		t.Error("no interrupt on the threads spinning on every CPU for a second")
	}
}

// TestKernelStatsUnavailable checks that a machine without the interrupt
// tracepoints or the counters records all the rest, after one warning
// line each: it asks for a tracepoint and an event no kernel has, with
// BPF counting off.
func TestKernelStatsUnavailable(t *testing.T) {
	bin := buildFixture(t, "faults")
	tp, ev := irqTracepoints[0].name, counterKinds[0].event
	irqTracepoints[0].name, counterKinds[0].event, countInKernel = "no_such_tracepoint", "no-such-event", false
	defer func() { irqTracepoints[0].name, counterKinds[0].event, countInKernel = tp, ev, true }()
	log := &logBuffer{t: t}
	res, p := recordCmd(t, Config{Command: []string{bin, "exit", "now"}, Stdout: io.Discard, Log: log})
	if res.ExitCode != 0 || res.Samples == 0 || len(p.Switches) == 0 {
		t.Errorf("recording without interrupts and counters: %+v, %d switches", res, len(p.Switches))
	}
	if len(p.IRQs) != 0 {
		t.Errorf("%d IRQ records", len(p.IRQs))
	}
	for _, th := range p.Threads {
		if th.Counters != nil {
			t.Errorf("thread %d has counters %v", th.TID, th.Counters)
		}
	}
	for _, warning := range []string{"trueprof: interrupts not recorded: ", "trueprof: per-thread counters not recorded: "} {
		if n := strings.Count(log.String(), warning); n != 1 {
			t.Errorf("%d lines %q, want 1", n, warning)
		}
	}
}

// TestCountersForked launches a shell that forks dd, which touches an
// 8 MiB buffer (2,048 pages) and exits: a process the kernel tracks from
// its fork, which the recorder learns of from its records only later.
func TestCountersForked(t *testing.T) {
	testutil.RequirePerf(t)
	sh := testutil.RequireCommand(t, "sh")
	testutil.RequireCommand(t, "dd")
	res, p := recordCmd(t, Config{Command: []string{sh, "-c", "dd if=/dev/zero of=/dev/null bs=8M count=1 2>/dev/null; true"}, Stdout: io.Discard})
	if res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	// The shell stays sh; its child forks as sh and execs dd. (Not the
	// lowest pid: after a wraparound the child's can be below the
	// shell's, 300 against 32767 in a CI run.)
	var dd, shell *model.Thread
	for _, th := range p.Threads {
		t.Logf("thread %d of %d %q: counters %v", th.TID, th.PID, th.Names, th.Counters)
		switch th.Name {
		case "dd":
			dd = th
		case "sh":
			shell = th
		}
	}
	if dd == nil || shell == nil || dd.PID == shell.PID {
		t.Fatalf("no forked dd process beside the shell among the threads")
	}
	// Besides its buffer dd faults in its start-up and stack.
	if n := dd.Counters[trace.CounterPageFaults]; n < 2048 || n > 2048+300 {
		t.Errorf("dd: %d page faults, want 2,048 to 2,348", n)
	}
}

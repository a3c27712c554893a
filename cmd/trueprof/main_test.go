package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trueprof/examples"
	"trueprof/internal/model"
	"trueprof/internal/report"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// binDir holds the trueprof binary and the fixture, world-readable so the
// unprivileged test can run them.
var binDir string

func TestMain(m *testing.M) {
	testutil.RunMain(m, "trueprof-cmd-test-", func(dir string) error {
		binDir = dir
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		_, err := testutil.BuildTrueprof(dir)
		return err
	})
}

func trueprof() string { return filepath.Join(binDir, "trueprof") }

func hotspots(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "hotspots")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	return testutil.BuildC(t, binDir, "hotspots", examples.Hotspots, "-pthread")
}

// TestSIGKILLLosesAtMostASecond kills the recorder without warning: the
// trace must still load, with samples up to about a second before death.
func TestSIGKILLLosesAtMostASecond(t *testing.T) {
	testutil.RequirePerf(t)
	out := filepath.Join(t.TempDir(), "killed.trace")
	cmd := exec.Command(trueprof(), "record", "-o", out, "--", hotspots(t), "100000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	killedAt := time.Now()
	cmd.Process.Kill()
	cmd.Wait()
	// The target was left running; find and stop it.
	exec.Command("pkill", "-KILL", "-f", hotspots(t)+" 100000").Run()
	p, err := model.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(p.Err, model.ErrNoEnd) && !errors.Is(p.Err, trace.ErrTruncated) {
		t.Errorf("killed trace: err %v, want a missing end or truncation", p.Err)
	}
	if len(p.Samples) == 0 {
		t.Fatal("no samples survived SIGKILL")
	}
	last := p.Samples[len(p.Samples)-1].Time
	startWall := p.Header.StartTime
	lastWall := startWall.Add(time.Duration(last - p.Header.StartNS))
	if lost := killedAt.Sub(lastWall); lost > 1500*time.Millisecond {
		t.Errorf("the last %v before SIGKILL were lost (limit: about 1 s)", lost)
	}
}

// TestSIGINT stops a recording like Ctrl-C: a complete trace, the target
// ended, and record exits with the target's status.
func TestSIGINT(t *testing.T) {
	testutil.RequirePerf(t)
	out := filepath.Join(t.TempDir(), "int.trace")
	cmd := exec.Command(trueprof(), "record", "-o", out, "--", hotspots(t), "100000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("record did not stop on SIGINT")
	}
	p, err := model.Open(out)
	if err != nil || p.Err != nil || p.End == nil || p.End.Reason != "signal" {
		t.Fatalf("trace after SIGINT: %v, %v, end %+v", err, p.Err, p.End)
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) {
		t.Errorf("record exited %d, want the target's 143 (terminated by SIGTERM)", code)
	}
}

// TestUnprivilegedFallsBackToUserOnly runs trueprof as nobody under
// perf_event_paranoid=2: kernel sampling is refused, so it must record
// user space only and say so in one line.
func TestUnprivilegedFallsBackToUserOnly(t *testing.T) {
	testutil.RequirePerf(t)
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root to switch to an unprivileged user")
	}
	para, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	if n, _ := strconv.Atoi(strings.TrimSpace(string(para))); n != 2 {
		testutil.Missing(t, "kernel.perf_event_paranoid is "+strings.TrimSpace(string(para))+"; the test needs 2")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		testutil.Missing(t, "no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	dir, err := os.MkdirTemp("", "trueprof-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chown(dir, uid, gid)
	out := filepath.Join(dir, "user.trace")
	cmd := exec.Command(trueprof(), "record", "-o", out, "--", hotspots(t), "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	cmd.Dir = dir
	stderr, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("record as nobody: %v\n%s", err, stderr)
	}
	if !strings.Contains(string(stderr), "recording user space only") {
		t.Errorf("no fallback warning in:\n%s", stderr)
	}
	p, err := model.Open(out)
	if err != nil || p.Err != nil {
		t.Fatalf("%v %v", err, p.Err)
	}
	if !p.Header.UserOnly || len(p.Samples) < 100 {
		t.Errorf("user-only %v, %d samples", p.Header.UserOnly, len(p.Samples))
	}
	for _, s := range p.Samples {
		if s.Kernel {
			t.Fatal("kernel sample in a user-only recording")
		}
	}
}

// TestReportAndExport runs the report and export commands on a real
// recording: JSON parses with the documented fields, and go tool pprof
// shows the same top function and self count as trueprof's flat view.
func TestReportAndExport(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.trace")
	if out, err := exec.Command(trueprof(), "record", "-o", tr, "--", hotspots(t), "800").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, view := range []string{"tprof", "flat", "tree", "arcflow"} {
		for _, format := range []string{"text", "json"} {
			out, err := exec.Command(trueprof(), "report", "-i", tr, "--view", view, "--format", format).Output()
			if err != nil || len(out) == 0 {
				t.Errorf("report %s %s: %v", view, format, err)
			}
			if format == "json" && !json.Valid(out) {
				t.Errorf("report %s: invalid JSON", view)
			}
		}
	}
	top := reportFlat(t, "-i", tr).Functions[0]
	pb := filepath.Join(dir, "t.pb.gz")
	if out, err := exec.Command(trueprof(), "export", "-i", tr, "--format", "pprof", "-o", pb).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	pp, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=5", "-sample_index=samples", pb).Output()
	if err != nil {
		t.Fatalf("go tool pprof: %v", err)
	}
	want := strconv.FormatUint(top.Self["samples"], 10)
	found := false
	for _, line := range strings.Split(string(pp), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == want && f[len(f)-1] == top.Name {
			found = true
		}
	}
	if !found {
		t.Errorf("go tool pprof -top does not show %s with %s samples:\n%s", top.Name, want, pp)
	}
	folded := filepath.Join(dir, "t.folded")
	if out, err := exec.Command(trueprof(), "export", "-i", tr, "--format", "folded", "-o", folded).CombinedOutput(); err != nil {
		t.Fatalf("export folded: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(folded)
	// CFI unwinding (the default) goes on past main's caller to _start.
	if !strings.Contains(string(b), "hotspots;_start;") || !strings.Contains(string(b), ";__libc_start_call_main;main;") {
		t.Errorf("folded stacks lack the main path:\n%.500s", b)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.trace")
	os.WriteFile(junk, []byte("this is not a trace"), 0o644)
	out, err := exec.Command(trueprof(), "report", "-i", junk).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "byte offset") {
		t.Errorf("report on junk: %v\n%s", err, out)
	}
	out, err = exec.Command(trueprof(), "record", "--event", "cycles", "-o", filepath.Join(dir, "x"), "--", "true").CombinedOutput()
	if err == nil {
		t.Log("this machine has a PMU")
	} else if !strings.Contains(string(out), "PMU") {
		t.Errorf("cycles without a PMU: unclear error:\n%s", out)
	}
	out, err = exec.Command(trueprof(), "record", "-o", filepath.Join(dir, "x"), "--", "/no/such/program").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "/no/such/program") {
		t.Errorf("missing program: %v\n%s", err, out)
	}
	// The recorder's own checks reach the command line as they are.
	for _, args := range [][]string{
		{"--mode", "ring", "--", "true"},
		{"--mech", "ptrace", "--", "true"},
		{"--mech", "hook", "-p", "1"},
		{"--call-graph", "fp,512", "--", "true"},
		{"-p", "1", "--", "true"},
	} {
		out, err = exec.Command(trueprof(), append([]string{"record", "-o", filepath.Join(dir, "x")}, args...)...).CombinedOutput()
		if err == nil || !strings.HasPrefix(string(out), "trueprof: record: ") || strings.Count(string(out), "\n") != 1 {
			t.Errorf("record %v: %v, want one line of the recorder's error:\n%s", args, err, out)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{{"256M", 256 << 20, true}, {"1g", 1 << 30, true}, {"4096", 4096, true}, {"10KB", 10 << 10, true}, {"x", 0, false}, {"-1", 0, false}} {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v", tt.in, got, err)
		}
	}
}

// TestParseMmapPages checks -m: pages as given or rounded up to a power
// of two, and sizes turned into pages, as perf -m reads them.
func TestParseMmapPages(t *testing.T) {
	page := os.Getpagesize()
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"", 0, true}, {"128", 128, true}, {"100", 128, true}, {"1", 1, true},
		{"2M", 2 << 20 / page, true}, {"512K", 512 << 10 / page, true}, {"3M", 4 << 20 / page, true},
		{"0", 0, false}, {"-4", 0, false}, {"x", 0, false}, {"0K", 0, false},
	} {
		got, err := parseMmapPages(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseMmapPages(%q) = %d, %v", tt.in, got, err)
		}
	}
}

// writeThreadsTrace writes a trace of process srv (pid 7): its main
// thread runs goroutine 1 and takes an interrupt; thread 8 is created as
// pool, exits, and its tid is reused by a thread named io.
func writeThreadsTrace(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := trace.NewWriter(f, &trace.Header{Event: "cpu-clock", Clock: "CLOCK_MONOTONIC", StartNS: 1000, Freq: 999}, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	str := func(s string) uint32 {
		id, err := w.Intern(s)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	mod := str("/usr/bin/srv")
	recs := []trace.Record{
		&trace.Comm{Time: 1000, PID: 7, TID: 7, Name: str("srv")},
		&trace.Location{ID: 1, Address: 0x401000, Module: mod, Lines: []trace.Line{{Function: str("main.serve")}}},
		&trace.Location{ID: 2, Address: 0x402000, Module: mod, Lines: []trace.Line{{Function: str("main.work")}}},
		&trace.StackNode{ID: 1, Location: 1},
		&trace.StackNode{ID: 2, Parent: 1, Location: 2},
		&trace.GoID{Time: 1100, PID: 7, TID: 7, GoID: 1},
		&trace.Sample{Time: 1500, PID: 7, TID: 7, Period: 1, Stack: 1},
		&trace.Fork{Time: 2000, PID: 7, PPID: 7, TID: 8, PTID: 7},
		&trace.Comm{Time: 2000, PID: 7, TID: 8, Name: str("pool")},
		&trace.Sample{Time: 2500, PID: 7, TID: 8, Period: 1, Stack: 2},
		&trace.Switch{Time: 3000, PID: 7, TID: 8, Out: true},
		&trace.Exit{Time: 5000, PID: 7, PPID: 7, TID: 8, PTID: 7},
		&trace.Counter{Time: 5000, PID: 7, TID: 8, Kind: trace.CounterPageFaults, Value: 9},
		&trace.Fork{Time: 6000, PID: 7, PPID: 7, TID: 8, PTID: 7},
		&trace.Comm{Time: 6000, PID: 7, TID: 8, Name: str("io")},
		&trace.Sample{Time: 6500, PID: 7, TID: 8, Period: 1, Stack: 2},
		&trace.Sample{Time: 6600, PID: 7, TID: 8, Period: 1, Stack: 2},
		&trace.IRQ{Time: 7000, PID: 7, TID: 7, Kind: trace.IRQHard, Vector: 30, Duration: 200},
		&trace.End{Time: 9000},
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestThreadsCommand runs the threads view, --thread, --by goroutine and
// --exclude-interrupts, and export --thread, on a written trace.
func TestThreadsCommand(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "threads.trace")
	writeThreadsTrace(t, tr)
	run := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command(trueprof(), args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out
	}
	var threads report.ThreadsReport
	if err := json.Unmarshal(run("report", "-i", tr, "--view", "threads", "--format", "json"), &threads); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, th := range threads.Threads {
		pf := "-"
		if th.PageFaults != nil {
			pf = strconv.FormatUint(*th.PageFaults, 10)
		}
		got = append(got, strings.Join([]string{strconv.Itoa(int(th.TID)), th.Name, strconv.FormatUint(th.StartNS, 10),
			strconv.FormatUint(th.EndNS, 10), strconv.FormatFloat(th.WallNS, 'f', 0, 64), strconv.FormatFloat(th.CPUNS, 'f', 0, 64),
			strconv.FormatUint(th.Samples, 10), strconv.FormatUint(th.Interrupts, 10), pf}, " "))
	}
	// srv lives 8µs; pool 3µs, 1 of them on CPU; io 3µs.
	want := "[7 srv 0 0 8000 8000 1 1 - 8 pool 2000 5000 3000 1000 1 0 9 8 io 6000 0 3000 3000 2 0 -]"
	if fmt.Sprint(got) != want {
		t.Errorf("threads %v\nwant    %s", got, want)
	}
	if err := json.Unmarshal(run("report", "-i", tr, "--view", "threads", "--format", "json", "--exclude-interrupts"), &threads); err != nil {
		t.Fatal(err)
	}
	if threads.Threads[0].WallNS != 7800 {
		t.Errorf("srv without its interrupt: wall %v, want 7800", threads.Threads[0].WallNS)
	}
	if out := string(run("report", "-i", tr, "--view", "tree", "--thread", "io")); !strings.Contains(out, "io_8") || strings.Contains(out, "pool") {
		t.Errorf("tree of io:\n%s", out)
	}
	if out := string(run("report", "-i", tr, "--view", "tree", "--by", "goroutine")); !strings.Contains(out, "goroutine 1\n") || !strings.Contains(out, "pool_8") {
		t.Errorf("tree by goroutine:\n%s", out)
	}
	folded := filepath.Join(dir, "io.folded")
	run("export", "-i", tr, "--format", "folded", "--thread", "i?", "-o", folded)
	if b, _ := os.ReadFile(folded); string(b) != "srv;main.serve;main.work 2\n" {
		t.Errorf("folded io: %q", b)
	}
	out, err := exec.Command(trueprof(), "report", "-i", tr, "--thread", "[x").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "syntax error in pattern") {
		t.Errorf("bad pattern: %v %s", err, out)
	}
}

package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// ticker runs for argv[1] seconds on two threads, calling outer, which
// calls inner three times: a few thousand events a second, so that a
// snapshot sees them only if the recorder hands partial batches on.
const ticker = `
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
static volatile long sink;
static double seconds;
__attribute__((noinline)) void inner(long i) { for (int k = 0; k < 200000; k++) sink += i; }
__attribute__((noinline)) void outer(long i) { inner(i); inner(i + 1); inner(i + 2); }
__attribute__((no_instrument_function)) static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
__attribute__((no_instrument_function)) static void *run(void *x) {
	double end = now() + seconds;
	for (long i = 0; now() < end; i++) outer(i);
	return 0;
}
__attribute__((no_instrument_function)) int main(int argc, char **argv) {
	seconds = atof(argv[1]);
	pthread_t t;
	pthread_create(&t, 0, run, 0);
	run(0);
	pthread_join(t, 0);
	return 0;
}
`

// treeCalls counts calls per function in the analysed trace, which must
// need no repairs: a snapshot never reads a half-written chunk.
func treeCalls(t *testing.T, p *model.Profile) map[string]uint64 {
	t.Helper()
	res, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Repairs; r.Unmatched != 0 || r.Popped != 0 {
		t.Errorf("snapshot needed repairs %+v: a chunk was read half-written", r)
	}
	c := map[string]uint64{}
	for _, f := range res.Functions {
		c[f.Name] += f.Calls
	}
	return c
}

// TestSnapshotWhileRecording reports on a continuous-mode trace while it
// is being written: every snapshot loads up to its last complete chunk,
// builds a consistent tree, and sees no fewer calls than the one before.
func TestSnapshotWhileRecording(t *testing.T) {
	testutil.RequirePerf(t)
	bin := testutil.BuildC(t, t.TempDir(), "ticker", ticker, "-pthread", "-finstrument-functions")
	out := filepath.Join(t.TempDir(), "live.trace")
	rec := exec.Command(trueprof(), "record", "--mode", "continuous", "-o", out, "--", bin, "8")
	var stderr strings.Builder
	rec.Stderr = &stderr
	defer func() { t.Logf("record: %s", stderr.String()) }()
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	defer rec.Process.Kill()
	// The trace begins once record has calibrated (the first time on a
	// machine, several seconds) and launched the target; its first events
	// must then show within the recorder's one-second flush.
	started := time.Now()
	for {
		if p, err := model.Open(out); err == nil && len(p.Events) > 0 {
			break
		}
		if time.Since(started) > time.Minute {
			t.Fatal("no events in the live trace after a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("first events after %v", time.Since(started).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	var last map[string]uint64
	for i := 0; i < 4; i++ {
		p, err := model.Open(out)
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		if !errors.Is(p.Err, model.ErrNoEnd) && !errors.Is(p.Err, trace.ErrTruncated) {
			t.Fatalf("snapshot %d: %v, want a trace without its end (end %+v)", i, p.Err, p.End)
		}
		t.Logf("snapshot %d at %v: %d events", i, time.Since(started).Round(time.Millisecond), len(p.Events))
		c := treeCalls(t, p)
		if c["outer"] == 0 || c["inner"] < 3*c["outer"]-6 || c["inner"] > 3*c["outer"] {
			t.Errorf("snapshot %d: outer %d, inner %d calls: want inner = 3 × outer, less the calls open at the cut", i, c["outer"], c["inner"])
		}
		if c["outer"] < last["outer"] {
			t.Errorf("snapshot %d has %d calls of outer, fewer than the previous one's %d", i, c["outer"], last["outer"])
		}
		last = c
		rep := exec.Command(trueprof(), "report", "-i", out, "--view", "tree")
		b, err := rep.CombinedOutput()
		if err != nil || !strings.Contains(string(b), "inner") || !strings.Contains(string(b), "no end record") {
			t.Errorf("report on the live trace: %v\n%s", err, b)
		}
		time.Sleep(400 * time.Millisecond)
	}
	if err := rec.Wait(); err != nil {
		t.Fatal(err)
	}
	p, err := model.Open(out)
	if err != nil || p.Err != nil {
		t.Fatalf("final trace: %v %v", err, p.Err)
	}
	if c := treeCalls(t, p); c["inner"] != 3*c["outer"] || c["outer"] < last["outer"] {
		t.Errorf("final: outer %d, inner %d calls (last snapshot: %d outer)", c["outer"], c["inner"], last["outer"])
	}
}

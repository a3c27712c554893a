package record

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/testutil"
)

// End-to-end tests of JIT symbolization: testdata/jit/jit.c is a minimal
// JIT that runs a hand-assembled loop from anonymous memory and names it
// through a perf map or a jitdump file, as V8, the JVM agents and others
// do.

// jitSeconds is how long (in CPU time) each phase of the fixture runs.
const jitSeconds = "0.6"

func buildJit(t *testing.T, dir string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "jit", "jit.c"))
	if err != nil {
		t.Fatal(err)
	}
	return testutil.BuildC(t, dir, "jit", string(src))
}

// jitNotes reads the "key value" lines the fixture wrote.
func jitNotes(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	notes := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok {
			notes[k] = v
		}
	}
	if notes["done"] != "1" {
		t.Fatalf("fixture did not finish: notes %q", b)
	}
	return notes
}

func noteTime(t *testing.T, notes map[string]string, key string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(notes[key], 10, 64)
	if err != nil {
		t.Fatalf("note %s: %v", key, err)
	}
	return v
}

// logBuffer keeps the recorder's warnings and shows them in the test log.
type logBuffer struct {
	t  *testing.T
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(strings.TrimSpace(string(b)))
	return l.b.Write(b)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// leafLocation returns the physical leaf location of a sample.
func leafLocation(p *model.Profile, s model.Sample) (module, function string) {
	if s.Stack == 0 {
		return "", ""
	}
	loc := p.Locations[p.Stacks[s.Stack].Location]
	return loc.Module, loc.Frames[len(loc.Frames)-1].Function
}

// stackNames returns the physical functions of a sample's stack, leaf first.
func stackNames(p *model.Profile, s model.Sample) []string {
	var names []string
	for _, l := range p.Stack(s.Stack, nil) {
		fr := p.Locations[l].Frames
		names = append(names, fr[len(fr)-1].Function)
	}
	return names
}

// jitSummary counts a recording's samples by leaf function, for messages.
func jitSummary(p *model.Profile) string {
	counts := map[string]float64{}
	for _, s := range p.Samples {
		mod, fn := leafLocation(p, s)
		counts[fn+" ("+mod+")"]++
	}
	return top(counts)
}

// recordJit records the fixture and checks that it ran to completion with
// at least minSamples samples.
func recordJit(t *testing.T, cfg Config, minSamples int) *model.Profile {
	t.Helper()
	cfg.Freq = 999
	res, p := recordCmd(t, cfg)
	if res.ExitCode != 0 || p.End == nil || p.End.Reason != "exited" {
		t.Fatalf("result %+v end %+v", res, p.End)
	}
	if len(p.Samples) < minSamples {
		t.Fatalf("only %d samples: %s", len(p.Samples), jitSummary(p))
	}
	return p
}

// recordPerfMap records the fixture in a mode that writes a perf map,
// with the arguments after NOTES, and returns the profile and the notes.
func recordPerfMap(t *testing.T, mode string, args ...string) (*model.Profile, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	bin := buildJit(t, dir)
	notes := filepath.Join(dir, "notes")
	p := recordJit(t, Config{Command: testutil.RemovingPerfMaps(t, append([]string{bin, mode, notes}, args...))}, 200)
	return p, jitNotes(t, notes)
}

// TestJitPerfMap: code in anonymous memory named by /tmp/perf-PID.map
// resolves to that name in module [jit], and the frame-pointer chain goes
// on through it into the C caller.
func TestJitPerfMap(t *testing.T) {
	testutil.RequirePerf(t)
	p, _ := recordPerfMap(t, "perfmap", "-1", jitSeconds)

	// The share is of the samples taken in user mode: under load the
	// kernel's return-to-user and switch paths take a fifth of them (a
	// CI run: 164 of 709), which says nothing of naming JIT code.
	named, chained, user := 0, 0, 0
	for _, s := range p.Samples {
		if !s.Kernel {
			user++
		}
		mod, fn := leafLocation(p, s)
		if fn != "jit_hot_loop" {
			continue
		}
		named++
		if mod != "[jit]" {
			t.Fatalf("jit_hot_loop in module %q, want [jit]", mod)
		}
		if names := stackNames(p, s); len(names) >= 3 && names[1] == "run" && names[2] == "main" {
			chained++
		}
	}
	t.Logf("%d samples: %s", len(p.Samples), jitSummary(p))
	if frac := float64(named) / float64(max(user, 1)); frac < 0.8 {
		t.Errorf("%d of %d user-mode samples (%.0f%%) in jit_hot_loop, want most of them", named, user, 100*frac)
	}
	if named > 0 && float64(chained) < 0.9*float64(named) {
		t.Errorf("only %d of %d jit_hot_loop samples have the stack jit_hot_loop;run;main", chained, named)
	}
	if frac := float64(p.Truncated) / float64(len(p.Samples)); frac > 0.05 {
		t.Errorf("%.1f%% of samples truncated: the chain does not continue through JIT code", 100*frac)
	}
}

// TestJitPerfMapUntrusted: a perf map owned by another user than the
// process's is not used (anyone can write to /tmp), and the recorder says
// so.
func TestJitPerfMapUntrusted(t *testing.T) {
	testutil.RequirePerf(t)
	if os.Geteuid() != 0 {
		testutil.Missing(t, "the fixture must chown its perf map to another user: needs root")
	}
	dir := t.TempDir()
	bin := buildJit(t, dir)
	notes := filepath.Join(dir, "notes")
	log := &logBuffer{t: t}
	p := recordJit(t, Config{Command: testutil.RemovingPerfMaps(t, []string{bin, "perfmap", notes, "12345", jitSeconds}), Log: log}, 200)
	mapPath := jitNotes(t, notes)["map"]

	anon := 0
	for _, s := range p.Samples {
		mod, fn := leafLocation(p, s)
		if fn == "jit_hot_loop" {
			t.Fatalf("a sample resolved through %s, owned by uid 12345: %s", mapPath, jitSummary(p))
		}
		if (mod == "[jit]" || mod == "[unknown]") && fn == mod {
			anon++
		}
	}
	t.Logf("%d samples: %s", len(p.Samples), jitSummary(p))
	if frac := float64(anon) / float64(len(p.Samples)); frac < 0.8 {
		t.Errorf("%d of %d samples (%.0f%%) in unnamed JIT code, want most of them", anon, len(p.Samples), 100*frac)
	}
	if !strings.Contains(log.String(), mapPath) {
		t.Errorf("no warning about the untrusted %s; log:\n%s", mapPath, log.String())
	}
}

// TestJitPerfMapCreatedLate: a JIT may write its perf map only after its
// code has run for a while (perf-map-agent attaches to a running JVM, for
// one). Samples taken once the map exists are named by it.
func TestJitPerfMapCreatedLate(t *testing.T) {
	testutil.RequirePerf(t)
	p, notes := recordPerfMap(t, "lateperfmap", jitSeconds)
	named := noteTime(t, notes, "named")

	var before, after, afterNamed int
	for _, s := range p.Samples {
		mod, fn := leafLocation(p, s)
		if mod != "[jit]" {
			continue
		}
		if s.Time < named {
			// Perf map entries have no time: once read, the map may
			// name code sampled shortly before it was written, as perf
			// report names all of it. Either is right.
			before++
			continue
		}
		after++
		if fn == "jit_hot_loop" {
			afterNamed++
		}
	}
	t.Logf("%d samples: %s; [jit] samples before the map %d, after %d, named after %d", len(p.Samples), jitSummary(p), before, after, afterNamed)
	if before < 100 || after < 100 {
		t.Fatalf("[jit] samples: %d before the map was written, %d after; want 100 or more each", before, after)
	}
	if float64(afterNamed) < 0.9*float64(after) {
		t.Errorf("only %d of %d JIT samples after the perf map was written resolve to jit_hot_loop", afterNamed, after)
	}
}

// TestJitDumpAddressReuse: a jitdump (announced by mapping it, perf's
// protocol) names code by time, so an address reused by new code
// resolves to the old name before the new code's load and to the new one
// after it.
func TestJitDumpAddressReuse(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	bin := buildJit(t, dir)
	checkJitDump(t, bin, "jitdump", jitSeconds, 100)
}

// TestJitDumpAtExit: a jitdump whose code loads are written only as the
// process exits still names the code by the times of the loads: the
// address reused by new code has the old name before the new code's load
// and the new one after it.
func TestJitDumpAtExit(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	bin := buildJit(t, dir)
	checkJitDump(t, bin, "exitjitdump", jitSeconds, 100)
}

// TestJitPerfMapAtExit: a perf map written only as the process exits (the
// JVM's -XX:+DumpPerfMapAtExit) names the code sampled before it, each
// address by its own entry.
func TestJitPerfMapAtExit(t *testing.T) {
	testutil.RequirePerf(t)
	p, notes := recordPerfMap(t, "exitperfmap", jitSeconds)
	second := noteTime(t, notes, "second")

	var first, later, unnamed int
	wrong := map[string]int{}
	for _, s := range p.Samples {
		mod, fn := leafLocation(p, s)
		switch {
		case mod != "[jit]":
		case fn == "[jit]":
			unnamed++
		case s.Time < second && fn == "jit_exit_first":
			first++
		case s.Time >= second && fn == "jit_exit_second":
			later++
		default:
			wrong[fn]++
		}
	}
	t.Logf("%d samples: %s", len(p.Samples), jitSummary(p))
	if first < 100 || later < 100 {
		t.Errorf("%d samples named jit_exit_first before the switch, %d jit_exit_second after it; want 100 or more each", first, later)
	}
	if unnamed > 0 || len(wrong) > 0 {
		t.Errorf("%d JIT samples left unnamed, misnamed: %v", unnamed, wrong)
	}
}

// checkJitDump records the jitdump fixture (mode jitdump or exitjitdump)
// running each code for seconds and checks that at least want samples of
// each are named right.
func checkJitDump(t *testing.T, bin, mode, seconds string, want int) {
	t.Helper()
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes")
	p := recordJit(t, Config{Command: []string{bin, mode, notes, dir, seconds}}, 2*want)
	n := jitNotes(t, notes)
	first, second := noteTime(t, n, "first"), noteTime(t, n, "second")

	var before, after, wrongBefore, wrongAfter int
	wrong := map[string]int{}
	for _, s := range p.Samples {
		mod, fn := leafLocation(p, s)
		if mod != "[jit]" {
			continue
		}
		switch {
		case s.Time < first:
			t.Errorf("sample in JIT code at %d, before the first load at %d", s.Time, first)
		case s.Time < second:
			if fn == "jit_first" {
				before++
			} else {
				wrongBefore++
				wrong["before the second load: "+fn]++
			}
		default:
			if fn == "jit_second" {
				after++
			} else {
				wrongAfter++
				wrong["after the second load: "+fn]++
			}
		}
	}
	t.Logf("%d samples: %s", len(p.Samples), jitSummary(p))
	t.Logf("before the second load: %d jit_first, %d other; after: %d jit_second, %d other %v", before, wrongBefore, after, wrongAfter, wrong)
	if before < want || after < want {
		t.Errorf("want %d or more samples each of jit_first before the second load and jit_second after it", want)
	}
	// A sample taken between the new code's installation and its load
	// record may be named after the old code; allow a few.
	if wrongBefore > 3 || wrongAfter > 3 {
		t.Errorf("JIT samples misnamed across the address reuse: %v", wrong)
	}
}

// TestJitShortLived: a JIT process that ends before the recorder gets to
// its samples (they are processed at least reorderSlack late, and the
// poll loop wakes every 100 ms) still has its code named.
func TestJitShortLived(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	bin := buildJit(t, dir)
	t.Run("perfmap", func(t *testing.T) {
		notes := filepath.Join(t.TempDir(), "notes")
		p := recordJit(t, Config{Command: testutil.RemovingPerfMaps(t, []string{bin, "perfmap", notes, "-1", "0.04"})}, 20)
		jitNotes(t, notes)
		// Samples in the kernel (preemptions, on a loaded machine up to a
		// quarter of them) are not the JIT's to name.
		named, user := 0, 0
		for _, s := range p.Samples {
			module, fn := leafLocation(p, s)
			if module != "[kernel.kallsyms]" {
				user++
			}
			if fn == "jit_hot_loop" {
				named++
			}
		}
		t.Logf("%d samples, %d in user space: %s", len(p.Samples), user, jitSummary(p))
		if float64(named) < 0.8*float64(user) {
			t.Errorf("%d of %d user-space samples in jit_hot_loop, want most of them", named, user)
		}
	})
	t.Run("jitdump", func(t *testing.T) {
		checkJitDump(t, bin, "jitdump", "0.03", 10)
	})
}

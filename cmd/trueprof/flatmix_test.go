package main

import (
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"trueprof/internal/report"
	"trueprof/internal/testutil"
)

// splitC runs the same loop in two functions, spinB twice as long as
// spinA per round: of the CPU time the two take, spinB has 2/3. The loop
// is a chain of register arithmetic, one definition for both functions,
// each aligned alike: a loop of volatile stores (sink += i) ran at a
// speed that depended on its address, and on one host spinB's copy took
// four times spinA's for twice the iterations (perf record: 80% of their
// samples, not 67%).
const splitC = `#include <stdlib.h>

static volatile unsigned long sink;

#define SPIN(name)                                                     \
	__attribute__((noinline, aligned(64))) void name(long n) {     \
		unsigned long x = 0;                                   \
		for (long i = 0; i < n; i++) {                         \
			x = x * 3 + i;                                 \
			__asm__ volatile("" : "+r"(x));                \
		}                                                      \
		sink = x;                                              \
	}
SPIN(spinA)
SPIN(spinB)

int main(int argc, char **argv) {
	int rounds = argc > 1 ? atoi(argv[1]) : 50;
	for (int r = 0; r < rounds; r++) {
		spinA(5000000);
		spinB(10000000);
	}
	return 0;
}
`

// TestFlatSamplesAndProbes records splitC sampled at 999 Hz with a probe
// on spinA only: the flat view shows spinA's exact calls and its samples,
// and the untraced spinB's samples and the CPU time they stand for, its
// share of the two functions' samples within 3 points of the program's
// 2/3.
func TestFlatSamplesAndProbes(t *testing.T) {
	testutil.RequirePerf(t)
	const rounds = 80
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "split", splitC)
	tr := filepath.Join(dir, "split.trace")
	if out, err := exec.Command(trueprof(), "record", "-F", "999", "--trace", "spinA", "-o", tr, "--", bin, strconv.Itoa(rounds)).CombinedOutput(); err != nil {
		t.Fatalf("record: %v\n%s", err, out)
	}
	flat := reportInstrFlat(t, tr)
	rows := map[string]report.InstrFlatFunction{}
	for _, f := range flat.Functions {
		rows[f.Name] = f
	}
	a, b := rows["spinA"], rows["spinB"]
	if a.Calls != rounds || a.Sampled {
		t.Errorf("spinA: %d calls (sampled %v), the program made %d", a.Calls, a.Sampled, rounds)
	}
	if !b.Sampled || b.Calls != 0 {
		t.Errorf("spinB: sampled %v with %d calls, want known from samples only", b.Sampled, b.Calls)
	}
	both := a.Self.Samples + b.Self.Samples
	if both < 500 {
		t.Fatalf("spinA %d and spinB %d samples: too few to compare shares", a.Self.Samples, b.Self.Samples)
	}
	share := 100 * float64(b.Self.Samples) / float64(both)
	t.Logf("spinB: %d of %d samples (%.1f%%, %.2f%% of all), sampled self %.0fms; spinA: %d calls, self %.0fms, %d samples",
		b.Self.Samples, both, share, b.SelfSamplesPercent, b.SampledSelfNS/1e6, a.Calls, a.Self.WallNS/1e6, a.Self.Samples)
	if math.Abs(share-200.0/3) > 3 {
		t.Errorf("spinB has %.1f%% of the two functions' samples, the program gives it 66.7%%", share)
	}
	// The rows carry samples, not zeros: the shares over all samples and
	// the time they stand for (periods of cpu-clock, about 1ms each).
	if want := percentOf(b.Self.Samples, flat.Total.Samples); math.Abs(b.SelfSamplesPercent-want) > 0.01 {
		t.Errorf("spinB: self_samples_percent %.2f, %d of %d samples is %.2f", b.SelfSamplesPercent, b.Self.Samples, flat.Total.Samples, want)
	}
	perSample := b.SampledSelfNS / float64(b.Self.Samples)
	if perSample < 0.5e6 || perSample > 2e6 || b.SelfPercent == 0 || b.SampledTotalNS < b.SampledSelfNS {
		t.Errorf("spinB: sampled self %.0fns over %d samples (%.0fns each, want about 1ms), total %.0fns, self%% %.2f",
			b.SampledSelfNS, b.Self.Samples, perSample, b.SampledTotalNS, b.SelfPercent)
	}
	if a.Self.Samples == 0 || a.SelfSamplesPercent == 0 {
		t.Errorf("spinA: traced and sampled, but %d samples (%.2f%%)", a.Self.Samples, a.SelfSamplesPercent)
	}
}

// reportInstrFlat runs trueprof report --view flat --format json on the
// instrumented recording tr and decodes its output.
func reportInstrFlat(t *testing.T, tr string) report.InstrFlatReport {
	t.Helper()
	out, err := exec.Command(trueprof(), "report", "-i", tr, "--view", "flat", "--format", "json").Output()
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	var flat report.InstrFlatReport
	if err := json.Unmarshal(out, &flat); err != nil {
		t.Fatal(err)
	}
	return flat
}

// percentOf is n as a percentage of all, rounded to hundredths as the
// reports round.
func percentOf(n, all uint64) float64 { return math.Round(float64(n)*10000/float64(all)) / 100 }

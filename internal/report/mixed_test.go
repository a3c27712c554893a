package report_test

import (
	"bytes"
	"strings"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
)

// mixedFixture is a recording with probes on main and hotA and cpu-clock
// samples every 1ms alongside (times in ns): main calls hotA for 4ms,
// then runs the untraced hotB for 8ms (2 of them in memset, also
// untraced), then hotA again for 2ms. The samples agree with the events:
// 16 samples, 6 in hotA, 8 in hotB (2 in memset), 2 in main itself.
func mixedFixture() *model.Profile {
	b := modeltest.NewHooks().Thread(1, 1, "mix")
	b.Run(1, 1, `0 +main 500000 s:main 1000000 +hotA 1500000 s:main;hotA 2500000 s:main;hotA
		3500000 s:main;hotA 4500000 s:main;hotA 5000000 -hotA
		5500000 s:main;hotB 6500000 s:main;hotB 7500000 s:main;hotB 8500000 s:main;hotB
		9500000 s:main;hotB 10500000 s:main;hotB 11500000 s:main;hotB;memset@/lib/libc.so.6
		12500000 s:main;hotB;memset@/lib/libc.so.6 13000000 +hotA 13500000 s:main;hotA
		14500000 s:main;hotA 15000000 -hotA 15500000 s:main 16000000 -main`)
	p := b.Profile()
	p.Header.Event, p.Header.Freq = "cpu-clock", 1000
	for i := range p.Samples {
		p.Samples[i].Period = 1_000_000
	}
	return p
}

// TestMixedGolden renders the flat view of a recording with samples and
// probes: untraced functions carry their samples and the time they stand
// for, traced ones their calls, times and samples.
func TestMixedGolden(t *testing.T) {
	runGolden(t, "mixed-", mixedFixture(), []report.Options{
		{View: "flat", Format: "text"},
		{View: "flat", Format: "json"},
		{View: "flat", Format: "text", Min: 20},
	})
}

// TestMixedFlat checks the flat view's rows of the mixed fixture against
// what the fixture was built with.
func TestMixedFlat(t *testing.T) {
	var flat report.InstrFlatReport
	writeJSON(t, mixedFixture(), report.Options{View: "flat"}, &flat)
	rows := map[string]report.InstrFlatFunction{}
	var order []string
	for _, f := range flat.Functions {
		rows[f.Name] = f
		order = append(order, f.Name)
	}
	if flat.Total.Samples != 16 {
		t.Fatalf("total samples %d, want 16", flat.Total.Samples)
	}
	tests := []struct {
		name                    string
		sampled                 bool
		calls                   uint64
		self, total             uint64 // samples
		selfPct, totalPct       float64
		sampledSelf, sampledTot float64
	}{
		{"hotA", false, 2, 6, 6, 37.5, 37.5, 6e6, 6e6},
		{"hotB", true, 0, 6, 8, 37.5, 50, 6e6, 8e6},
		{"memset", true, 0, 2, 2, 12.5, 12.5, 2e6, 2e6},
		{"main", false, 1, 2, 16, 12.5, 100, 2e6, 16e6},
	}
	for _, tt := range tests {
		f, ok := rows[tt.name]
		if !ok {
			t.Errorf("%s: no row", tt.name)
			continue
		}
		if f.Sampled != tt.sampled || f.Calls != tt.calls || f.Self.Samples != tt.self || f.Total.Samples != tt.total ||
			f.SelfSamplesPercent != tt.selfPct || f.TotalSamplesPercent != tt.totalPct ||
			f.SampledSelfNS != tt.sampledSelf || f.SampledTotalNS != tt.sampledTot {
			t.Errorf("%s: sampled %v calls %d samples %d/%d (%.1f%%/%.1f%%) sampled time %.0f/%.0f, want %v %d %d/%d (%.1f%%/%.1f%%) %.0f/%.0f",
				tt.name, f.Sampled, f.Calls, f.Self.Samples, f.Total.Samples, f.SelfSamplesPercent, f.TotalSamplesPercent,
				f.SampledSelfNS, f.SampledTotalNS, tt.sampled, tt.calls, tt.self, tt.total, tt.selfPct, tt.totalPct, tt.sampledSelf, tt.sampledTot)
		}
	}
	// hotB's 6ms sampled self ranks with hotA's 6ms traced one, and
	// before it by its larger total; main's 10ms self includes hotB's 8ms.
	if hotB := rows["hotB"]; hotB.SelfPercent != 37.5 || hotB.TotalPercent != 50 {
		t.Errorf("hotB: self %.2f%% total %.2f%% of the 16ms, want 37.5%% and 50%%", hotB.SelfPercent, hotB.TotalPercent)
	}
	if want := "[main hotB hotA memset]"; strings.Join(order, " ") != strings.Trim(want, "[]") {
		t.Errorf("order %v, want %s", order, want)
	}
}

// TestPureLayoutsUnchanged: without samples the flat view of probes has
// no sample columns, and a sampling recording keeps its own flat view.
func TestPureLayoutsUnchanged(t *testing.T) {
	p := mixedFixture()
	p.Samples = nil
	var buf bytes.Buffer
	if err := report.Write(&buf, p, report.Options{View: "flat", Format: "text"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "SMP") || strings.Contains(buf.String(), "~") {
		t.Errorf("flat view of probes alone shows samples:\n%s", buf.String())
	}
	var flat report.InstrFlatReport
	writeJSON(t, p, report.Options{View: "flat"}, &flat)
	for _, f := range flat.Functions {
		if f.SelfSamplesPercent != 0 || f.SampledSelfNS != 0 || f.Sampled {
			t.Errorf("%s: sample fields %+v without samples", f.Name, f)
		}
	}
}

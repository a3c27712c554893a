package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/calltree"
)

func TestFormatNS(t *testing.T) {
	tests := []struct {
		ns   float64
		want string
	}{
		{0, "0"},
		{812, "812ns"},
		{2.5, "2.5ns"},
		{0.25, "0.25ns"},
		{0.0001, "0"},
		{999.96, "1µs"},
		{1000, "1µs"},
		{56_700, "56.7µs"},
		{99_750, "99.75µs"},
		{999_999, "1ms"},
		{1_234_000, "1.234ms"},
		{1_234_567, "1.235ms"},
		{2_500_000_000, "2.5s"},
		{4_000_000_000_000, "4000s"},
		{-1500, "-1.5µs"},
	}
	for _, tt := range tests {
		if got := formatNS(tt.ns); got != tt.want {
			t.Errorf("formatNS(%v) = %q, want %q", tt.ns, got, tt.want)
		}
	}
}

// TestAppendNSIsLogTen: appendNS, which tells a value's decimals by
// comparisons, formats as the definition does with math.Log10 and
// strconv.ParseFloat, over values of every magnitude, those next to
// powers of ten and to where rounding moves to the next unit.
func TestAppendNSIsLogTen(t *testing.T) {
	// byLog10 is formatNS as it was first written: its definition.
	var byLog10 func(ns float64) string
	byLog10 = func(ns float64) string {
		switch {
		case ns == 0:
			return "0"
		case ns < 0:
			return "-" + byLog10(-ns)
		case math.IsInf(ns, 0) || math.IsNaN(ns):
			return fmt.Sprint(ns)
		}
		for i, u := range nsUnits {
			v := ns / u.scale
			dec := max(0, min(3, 3-int(math.Floor(math.Log10(v)))))
			s := strconv.FormatFloat(v, 'f', dec, 64)
			if r, _ := strconv.ParseFloat(s, 64); r >= 1000 && i < len(nsUnits)-1 {
				continue
			}
			if strings.Contains(s, ".") {
				s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
			}
			if s == "0" {
				return "0"
			}
			return s + u.name
		}
		panic("unreachable")
	}
	values := []float64{math.Inf(1), math.Inf(-1), math.NaN(), math.SmallestNonzeroFloat64, math.MaxFloat64, 1e-300}
	for p := 1e-4; p < 1e13; p *= 10 {
		for _, f := range []float64{1, 9.9995, 9.99949, 9.9994999, 99.995, 99.9949, 999.95, 999.949999, 0.99995} {
			v := p * f
			values = append(values, v, math.Nextafter(v, 0), math.Nextafter(v, math.Inf(1)), -v)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		values = append(values, math.Pow(10, r.Float64()*16-4), float64(r.Uint64N(1<<40)), float64(r.Uint64N(100000))/4)
	}
	for _, v := range values {
		if got, want := string(appendNS([]byte("x"), v)[1:]), byLog10(v); got != want {
			t.Errorf("appendNS(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestCallflowLineIsPrintf: callflowLine puts a line together as the
// format of its doc comment prints it, whatever is measured, for values
// wider than their columns, names with multibyte runes, every kind.
func TestCallflowLineIsPrintf(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	kinds := []calltree.FlowKind{calltree.FlowEntry, calltree.FlowExit, calltree.FlowPopped, calltree.FlowUnmatched,
		calltree.FlowUnclosed, calltree.FlowDetach, calltree.FlowDetached, calltree.FlowEnd}
	funcs := []calltree.Func{{Name: "main", Module: "/usr/bin/app"}, {Name: "µ::größe", Module: "/lib/libé.so"}, {Name: "app_1"}}
	num := func() uint64 { return r.Uint64() >> r.IntN(64) }
	ns := func() float64 { return []float64{0, -1.5, float64(num()), r.Float64() * 1e4, 1e15}[r.IntN(5)] }
	labels := map[calltree.Func]string{}
	var b []byte
	for range 20000 {
		h := &InstrHeader{CPUMeasured: r.IntN(2) == 0, InterruptsMeasured: r.IntN(2) == 0}
		samples := r.IntN(2) == 0
		f := funcs[r.IntN(len(funcs))]
		e := &CallflowEvent{OffsetNS: num(), FlowEvent: calltree.FlowEvent{Kind: kinds[r.IntN(len(kinds))], Level: r.IntN(5) - 1, Name: f.Name, Module: f.Module,
			Delta: calltree.Metrics{WallNS: ns(), WallNSRaw: num(), CPUNS: ns(), Dispatches: num(), Interrupts: num(), Samples: num()}}}
		cpu, ds, in := formatNS(e.Delta.CPUNS), fmt.Sprint(e.Delta.Dispatches), fmt.Sprint(e.Delta.Interrupts)
		if !h.CPUMeasured {
			cpu, ds = "-", "-"
		}
		if !h.InterruptsMeasured {
			in = "-"
		}
		want := fmt.Sprintf("%12s %10s %10s %10s %6s %6s", formatNS(float64(e.OffsetNS)), formatNS(e.Delta.WallNS), formatNS(float64(e.Delta.WallNSRaw)), cpu, ds, in)
		if samples {
			want += fmt.Sprintf(" %6d", e.Delta.Samples)
		}
		mark, indent := "<", strings.Repeat("  ", max(0, e.Level-1))
		switch e.Kind {
		case calltree.FlowEntry:
			mark = ">"
		case calltree.FlowEnd, calltree.FlowDetach:
			mark, indent = "=", strings.Repeat("  ", max(0, e.Level))
		}
		want += fmt.Sprintf("  %s%s %s%s\n", indent, mark, funcLabel(f), flowNotes[e.Kind])
		b = callflowLine(b[:0], e, h, samples, labels)
		if string(b) != want {
			t.Fatalf("%+v %+v samples %v:\n%q\nwant\n%q", e, h, samples, b, want)
		}
	}
}

func TestMetricNames(t *testing.T) {
	for _, name := range append(MetricNames(), "") {
		if _, ok := metricByName(name); !ok {
			t.Errorf("metric %q unknown", name)
		}
	}
	if m, _ := metricByName(""); m.name != "wall" {
		t.Errorf("default metric %q, want wall", m.name)
	}
	if m, _ := metricByName("dispatches"); m.format(3) != "3" {
		t.Errorf("dispatches format %q", m.format(3))
	}
}

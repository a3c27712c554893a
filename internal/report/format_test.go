package report

import "testing"

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

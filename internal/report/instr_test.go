package report_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
	"trueprof/internal/trace"
)

func TestInstrGolden(t *testing.T) {
	var opts []report.Options
	for _, view := range []string{"flat", "tree", "arcflow", "callflow"} {
		for _, format := range report.Formats() {
			opts = append(opts, report.Options{View: view, Format: format})
		}
		opts = append(opts,
			report.Options{View: view, Format: "text", Raw: true},
			report.Options{View: view, Format: "text", Filter: model.Filter{PID: 1, HasPID: true}})
		if view != "callflow" {
			opts = append(opts,
				report.Options{View: view, Format: "text", Metric: "cpu"},
				report.Options{View: view, Format: "text", Min: 5})
		}
	}
	opts = append(opts,
		report.Options{View: "tree", Format: "text", Metric: "dispatches"},
		report.Options{View: "tree", Format: "text", Root: "compute"},
		report.Options{View: "tree", Format: "text", ExcludeInterrupts: true},
		report.Options{View: "tree", Format: "text", Filter: model.Filter{Thread: "io"}},
		report.Options{View: "callflow", Format: "text", Filter: model.Filter{PID: 1, TID: 2, HasPID: true, HasTID: true}},
		report.Options{View: "tprof", Format: "text"},
		report.Options{View: "threads", Format: "text"},
		report.Options{View: "threads", Format: "json"},
		report.Options{View: "threads", Format: "text", Raw: true},
		report.Options{View: "threads", Format: "text", Metric: "cpu", ExcludeInterrupts: true},
		report.Options{View: "threads", Format: "text", Filter: model.Filter{Thread: "work*"}},
	)
	runGolden(t, "instr-", modeltest.InstrFixture(), opts)
}

// TestGoGolden renders a Go program's recording by goroutine, and its
// samples alone (a sampling recording) too.
func TestGoGolden(t *testing.T) {
	var opts []report.Options
	for _, view := range []string{"tree", "threads"} {
		for _, format := range report.Formats() {
			opts = append(opts, report.Options{View: view, Format: format, By: "goroutine"})
		}
	}
	runGolden(t, "go-", modeltest.GoFixture(), append(opts,
		report.Options{View: "callflow", Format: "text", By: "goroutine"},
		report.Options{View: "flat", Format: "text", By: "goroutine"},
		report.Options{View: "tree", Format: "text", By: "thread"}))
	p := modeltest.GoFixture()
	p.Events = nil
	runGolden(t, "go-sampling-", p, opts)
}

// TestDefaultBy: the call views of an instrumented Go recording are by
// goroutine unless told otherwise (its calls return on whatever thread
// the goroutine runs on then); its threads view, one with a thread
// filter, and its samples alone are by thread.
func TestDefaultBy(t *testing.T) {
	samples := modeltest.GoFixture()
	samples.Events = nil
	for _, tt := range []struct {
		p    *model.Profile
		o    report.Options
		want string
	}{
		{modeltest.GoFixture(), report.Options{View: "tree"}, "goroutine"},
		{modeltest.GoFixture(), report.Options{View: "flat"}, "goroutine"},
		{modeltest.GoFixture(), report.Options{View: "callflow"}, "goroutine"},
		{modeltest.GoFixture(), report.Options{View: "threads"}, "thread"},
		{modeltest.GoFixture(), report.Options{View: "tree", Filter: model.Filter{Thread: "*"}}, "thread"},
		{samples, report.Options{View: "tree"}, "thread"},
	} {
		by := tt.o
		by.By = tt.want
		if got, want := writeText(t, tt.p, tt.o), writeText(t, tt.p, by); got != want {
			t.Errorf("%s %+v with events %v: not the report by %s:\n%s", tt.o.View, tt.o.Filter, len(tt.p.Events) > 0, tt.want, got)
		}
	}
}

// instrJSON runs a JSON report of an instrumented recording into a
// generic map, so that the keys are checked by name.
func instrJSON(t *testing.T, p *model.Profile, o report.Options) map[string]any {
	t.Helper()
	o.Format = "json"
	var buf bytes.Buffer
	if err := report.Write(&buf, p, o); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("unmarshal: %v\n%s", err, buf.Bytes())
	}
	return m
}

var metricKeys = []string{"wall_ns", "wall_ns_raw", "delta_ns", "cpu_ns", "dispatches", "dispatches_voluntary", "dispatches_involuntary", "interrupts", "interrupt_ns", "samples"}

func hasMetrics(t *testing.T, where string, v any) {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s = %v, want a metrics object", where, v)
		return
	}
	for _, k := range metricKeys {
		if _, ok := m[k].(float64); !ok {
			t.Errorf("%s.%s = %v, want a number", where, k, m[k])
		}
	}
}

// TestInstrJSONSchema checks, by name, the fields consumers of the JSON
// of instrumented views rely on.
func TestInstrJSONSchema(t *testing.T) {
	p := modeltest.InstrFixture()
	for _, view := range []string{"flat", "tree", "arcflow", "callflow"} {
		t.Run(view, func(t *testing.T) {
			r := instrJSON(t, p, report.Options{View: view})
			for _, k := range []string{"view", "instrument", "metric", "event", "start_time", "by", "total", "calls", "events",
				"first_ns", "last_ns", "span_ns", "processes", "threads", "raw", "calibrated", "calibration", "cpu_measured",
				"interrupts_measured", "exclude_interrupts", "repairs", "dropped", "lost", "lost_by_kind", "throttled",
				"truncated", "complete", "warnings"} {
				if _, ok := r[k]; !ok {
					t.Errorf("header field %q missing", k)
				}
			}
			hasMetrics(t, "total", r["total"])
			if r["view"] != view || r["instrument"] != "hook" || r["metric"] != "wall" || r["lost"] != 0.0 ||
				r["events"] != 30.0 || r["calls"] != 15.0 || r["calibrated"] != true {
				t.Errorf("header: view %v instrument %v metric %v lost %v events %v calls %v calibrated %v",
					r["view"], r["instrument"], r["metric"], r["lost"], r["events"], r["calls"], r["calibrated"])
			}
			cal, _ := r["calibration"].(map[string]any)
			if cal["statistic"] != "min" || fmt.Sprint(cal["overhead_ns"]) != "[300 250 400 100]" {
				t.Errorf("calibration = %v", r["calibration"])
			}
			rp, _ := r["repairs"].(map[string]any)
			if rp["popped"] != 1.0 || rp["unmatched"] != 1.0 || rp["unclosed"] != 0.0 {
				t.Errorf("repairs = %v", r["repairs"])
			}
			if w, _ := r["warnings"].([]any); len(w) != 2 {
				t.Errorf("warnings = %v, want the two repairs", r["warnings"])
			}

			switch view {
			case "flat":
				for _, f := range r["functions"].([]any) {
					f := f.(map[string]any)
					where := fmt.Sprint("function ", f["name"])
					if _, ok := f["calls"].(float64); !ok {
						t.Errorf("%s: calls = %v, want a number", where, f["calls"])
					}
					hasMetrics(t, where+" self", f["self"])
					hasMetrics(t, where+" total", f["total"])
					for _, k := range []string{"name", "module", "sampled", "self_percent", "total_percent", "min_self_ns", "max_self_ns"} {
						if _, ok := f[k]; !ok {
							t.Errorf("%s: %q missing", where, k)
						}
					}
				}
			case "tree":
				var walk func(n map[string]any)
				walk = func(n map[string]any) {
					where := fmt.Sprint("node ", n["name"])
					for _, k := range []string{"level", "recursion", "sampled", "calls", "callees", "cum_percent", "min_self_ns", "max_self_ns"} {
						if _, ok := n[k].(float64); !ok && k != "sampled" {
							t.Errorf("%s: %s = %v, want a number", where, k, n[k])
						}
					}
					hasMetrics(t, where+" base", n["base"])
					hasMetrics(t, where+" cum", n["cum"])
					children, ok := n["children"].([]any)
					if !ok {
						t.Errorf("%s: children = %v, want an array", where, n["children"])
					}
					for _, c := range children {
						walk(c.(map[string]any))
					}
				}
				for _, pr := range r["processes"].([]any) {
					pr := pr.(map[string]any)
					hasMetrics(t, "process total", pr["total"])
					for _, th := range pr["threads"].([]any) {
						th := th.(map[string]any)
						for _, k := range []string{"tid", "start_ns", "name", "first_ns", "last_ns", "events", "repairs"} {
							if _, ok := th[k]; !ok {
								t.Errorf("thread %v: %q missing", th["name"], k)
							}
						}
						walk(th["root"].(map[string]any))
					}
				}
			case "arcflow":
				for _, s := range r["functions"].([]any) {
					s := s.(map[string]any)
					hasMetrics(t, fmt.Sprint(s["name"], " base"), s["base"])
					hasMetrics(t, fmt.Sprint(s["name"], " cum"), s["cum"])
					for _, side := range []string{"parents", "children"} {
						rows, ok := s[side].([]any)
						if !ok {
							t.Errorf("%v: %s = %v", s["name"], side, s[side])
						}
						for _, row := range rows {
							row := row.(map[string]any)
							if _, ok := row["calls"].(float64); !ok {
								t.Errorf("%v %s %v: calls = %v", s["name"], side, row["name"], row["calls"])
							}
							if _, ok := row["share_percent"].(float64); !ok {
								t.Errorf("%v %s %v: share_percent missing", s["name"], side, row["name"])
							}
							hasMetrics(t, "row cum", row["cum"])
						}
					}
				}
			case "callflow":
				if _, ok := r["base_ns"].(float64); !ok {
					t.Errorf("base_ns = %v", r["base_ns"])
				}
				threads := r["threads"].([]any)
				if len(threads) != 4 {
					t.Fatalf("%d threads, want 4", len(threads))
				}
				for _, th := range threads {
					for _, e := range th.(map[string]any)["events"].([]any) {
						e := e.(map[string]any)
						for _, k := range []string{"offset_ns", "time_ns", "kind", "level", "name", "module"} {
							if _, ok := e[k]; !ok {
								t.Errorf("event %v: %q missing", e, k)
							}
						}
						hasMetrics(t, "event delta", e["delta"])
					}
				}
			}
		})
	}
}

// textRows returns the rows of a text tree or callflow as maps from column to value,
// the NAME column trimmed.
func textRows(t *testing.T, out string) []map[string]string {
	t.Helper()
	var cols []string
	var rows []map[string]string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "Thread" || f[0] == "Goroutine" || f[0] == "Process") {
			continue
		}
		if len(f) > 2 && (f[0] == "LV" || f[0] == "CALLS" || f[0] == "TIME" || f[0] == "PID") &&
			(f[len(f)-1] == "NAME" || f[len(f)-1] == "EVENT") {
			cols = f
			continue
		}
		if cols == nil || len(f) < len(cols) {
			continue
		}
		row := map[string]string{}
		for i, c := range cols[:len(cols)-1] {
			row[c] = f[i]
		}
		row[cols[len(cols)-1]] = strings.Join(f[len(cols)-1:], " ")
		rows = append(rows, row)
	}
	return rows
}

func writeText(t *testing.T, p *model.Profile, o report.Options) string {
	t.Helper()
	o.Format = "text"
	var buf bytes.Buffer
	if err := report.Write(&buf, p, o); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestInstrRaw(t *testing.T) {
	p := modeltest.InstrFixture()
	var cal, raw report.InstrTreeReport
	writeJSON(t, p, report.Options{View: "tree"}, &cal)
	writeJSON(t, p, report.Options{View: "tree", Raw: true}, &raw)
	if !raw.Raw || raw.Calibrated || raw.Calibration != nil {
		t.Errorf("raw header: raw %v calibrated %v calibration %v", raw.Raw, raw.Calibrated, raw.Calibration)
	}
	// The threads' lives: app and db 1805µs, worker 260µs, io 100µs.
	if raw.Total.WallNS != float64(raw.Total.WallNSRaw) || raw.Total.DeltaNS != 0 || raw.Total.WallNSRaw != 3_970_000 {
		t.Errorf("raw total %+v, want wall = raw = 3.97ms, delta 0", raw.Total)
	}
	if cal.Total.WallNSRaw != raw.Total.WallNSRaw || cal.Total.WallNS >= raw.Total.WallNS || cal.Total.DeltaNS == 0 {
		t.Errorf("calibrated total %+v vs raw %+v", cal.Total, raw.Total)
	}
	var walk func(n *report.InstrTreeNode)
	walk = func(n *report.InstrTreeNode) {
		if n.Base.DeltaNS != 0 || n.Cum.DeltaNS != 0 || n.Base.WallNS != float64(n.Base.WallNSRaw) {
			t.Errorf("raw node %s: base %+v cum %+v", n.Name, n.Base, n.Cum)
		}
		for i := range n.Children {
			walk(&n.Children[i])
		}
	}
	for _, pr := range raw.Processes {
		for i := range pr.Threads {
			walk(&pr.Threads[i].Root)
		}
	}

	out := writeText(t, p, report.Options{View: "tree", Raw: true})
	for _, want := range []string{"Calibration: not applied (--raw)", "Times:      raw: as recorded"} {
		if !strings.Contains(out, want) {
			t.Errorf("raw header lacks %q:\n%s", want, out)
		}
	}
	rows := textRows(t, out)
	if len(rows) == 0 {
		t.Fatalf("no rows:\n%s", out)
	}
	for _, r := range rows {
		if r["DELTA"] != "0" {
			t.Errorf("raw row %s: DELTA %q, want 0", r["NAME"], r["DELTA"])
		}
	}
	// main's raw base: 10+10+10 before parse and compute's calls... read
	// from the calibrated text instead: its DELTA is not zero.
	calRows := textRows(t, writeText(t, p, report.Options{View: "tree"}))
	for _, r := range calRows {
		if r["NAME"] == "main (app)" && (r["DELTA"] != "800ns" || r["BASE"] != "1.219ms") {
			t.Errorf("calibrated main: %v", r)
		}
	}
	for _, r := range rows {
		if r["NAME"] == "main (app)" && r["BASE"] != "1.22ms" {
			t.Errorf("raw main: %v, want BASE 1.22ms", r)
		}
	}

	// Callflow: the raw WALL column is the RAW column.
	for _, r := range textRows(t, writeText(t, p, report.Options{View: "callflow", Raw: true})) {
		if r["WALL"] != r["RAW"] {
			t.Errorf("raw callflow line %v: WALL != RAW", r)
		}
	}
}

func TestInstrMetric(t *testing.T) {
	p := modeltest.InstrFixture()
	tests := []struct {
		metric string
		// main's row in the tree, and flat's first function
		base, cum, first string
	}{
		{"", "1.219ms", "1.797ms", "main"},
		{"wall", "1.219ms", "1.797ms", "main"},
		// main's 1ms after compute: preempted 50µs; compute blocked 200µs.
		{"cpu", "1.169ms", "1.547ms", "main"},
		// main and compute were switched out once each; main's total
		// has both.
		{"dispatches", "1", "2", "main"},
	}
	for _, tt := range tests {
		t.Run(tt.metric, func(t *testing.T) {
			o := report.Options{View: "tree", Metric: tt.metric}
			found := false
			for _, r := range textRows(t, writeText(t, p, o)) {
				if r["NAME"] == "main (app)" {
					found = true
					if r["BASE"] != tt.base || r["CUM"] != tt.cum {
						t.Errorf("main: BASE %s CUM %s, want %s %s", r["BASE"], r["CUM"], tt.base, tt.cum)
					}
				}
			}
			if !found {
				t.Error("no main row")
			}
			var flat report.InstrFlatReport
			o.View = "flat"
			writeJSON(t, p, o, &flat)
			if want := tt.metric; flat.Metric != want && !(want == "" && flat.Metric == "wall") {
				t.Errorf("header metric %q", flat.Metric)
			}
			if flat.Functions[0].Name != tt.first {
				t.Errorf("flat's first function %s, want %s", flat.Functions[0].Name, tt.first)
			}
			// JSON always has every metric.
			if f := flat.Functions[0]; f.Self.WallNS == 0 || f.Self.CPUNS == 0 || f.Self.Dispatches == 0 {
				t.Errorf("flat's first function self %+v", f.Self)
			}
		})
	}

	// Without context switches CPU time is not measured: cpu is an error.
	q := modeltest.NewHooks().Thread(1, 1, "a").Run(1, 1, "0 +main 10 -main").Profile()
	var buf bytes.Buffer
	err := report.Write(&buf, q, report.Options{View: "flat", Format: "text", Metric: "cpu"})
	if err == nil || !strings.Contains(err.Error(), "no context switches") || buf.Len() != 0 {
		t.Errorf("cpu without switches: %v, %d bytes", err, buf.Len())
	}
	out := writeText(t, q, report.Options{View: "tree"})
	if !strings.Contains(out, "CPU:        not measured") {
		t.Errorf("no 'not measured' CPU line:\n%s", out)
	}
	for _, r := range textRows(t, out) {
		if r["DS"] != "-" {
			t.Errorf("DS %q without switches, want -", r["DS"])
		}
	}
}

func TestInstrMin(t *testing.T) {
	p := modeltest.InstrFixture() // total wall 3.944ms
	tests := []struct {
		name                         string
		min                          float64
		flat, arcflow, tree, threads int
	}{
		{"zero keeps all", 0, 11, 11, 19, 4},
		// 1% is 39.44µs: the innermost parses, db's sorts and memcpy go;
		// the flat view keeps memcpy, whose sample stands for 1.001ms.
		{"1%", 1, 10, 9, 14, 4},
		// 5% is 197.2µs: db's root time (1.605ms after query) stays.
		{"5%", 5, 3, 4, 7, 3},
		{"above everything", 101, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var flat report.InstrFlatReport
			writeJSON(t, p, report.Options{View: "flat", Min: tt.min}, &flat)
			if len(flat.Functions) != tt.flat {
				t.Errorf("flat: %d functions, want %d", len(flat.Functions), tt.flat)
			}
			for _, f := range flat.Functions {
				if f.SelfPercent < tt.min-0.005 {
					t.Errorf("flat: %s self %.2f%% < min", f.Name, f.SelfPercent)
				}
			}
			var arc report.InstrArcflowReport
			writeJSON(t, p, report.Options{View: "arcflow", Min: tt.min}, &arc)
			if len(arc.Functions) != tt.arcflow {
				t.Errorf("arcflow: %d stanzas, want %d", len(arc.Functions), tt.arcflow)
			}
			var tree report.InstrTreeReport
			writeJSON(t, p, report.Options{View: "tree", Min: tt.min}, &tree)
			nodes, threads := 0, 0
			var count func(n *report.InstrTreeNode)
			count = func(n *report.InstrTreeNode) {
				nodes++
				if n.CumPercent < tt.min-0.005 {
					t.Errorf("tree: %s cum %.2f%% < min", n.Name, n.CumPercent)
				}
				for i := range n.Children {
					count(&n.Children[i])
				}
			}
			for _, pr := range tree.Processes {
				for i := range pr.Threads {
					threads++
					count(&pr.Threads[i].Root)
				}
			}
			if nodes != tt.tree || threads != tt.threads {
				t.Errorf("tree: %d nodes in %d threads, want %d in %d", nodes, threads, tt.tree, tt.threads)
			}
		})
	}
	var buf bytes.Buffer
	if err := report.Write(&buf, p, report.Options{View: "callflow", Format: "text", Min: 1}); err == nil || buf.Len() != 0 {
		t.Errorf("callflow with min: %v", err)
	}
}

func TestInstrFilter(t *testing.T) {
	p := modeltest.InstrFixture()
	tests := []struct {
		name               string
		f                  model.Filter
		processes, threads int
		events             uint64
		flows              []string // callflow threads
	}{
		{"none", model.Filter{}, 2, 4, 30, []string{"app_1", "worker_2", "io_2", "db_3"}},
		{"pid 1", model.Filter{PID: 1, HasPID: true}, 1, 3, 24, []string{"app_1", "worker_2", "io_2"}},
		{"tid 2", model.Filter{TID: 2, HasTID: true}, 1, 2, 10, []string{"worker_2", "io_2"}},
		{"pid 3 tid 3", model.Filter{PID: 3, TID: 3, HasPID: true, HasTID: true}, 1, 1, 6, []string{"db_3"}},
		{"no such pid", model.Filter{PID: 7, HasPID: true}, 0, 0, 0, nil},
		// Any of a thread's names: the second tid 2 was worker first.
		{"thread worker", model.Filter{Thread: "worker"}, 1, 2, 10, []string{"worker_2", "io_2"}},
		{"thread i?", model.Filter{Thread: "i?"}, 1, 1, 2, []string{"io_2"}},
		{"thread 3", model.Filter{Thread: "3"}, 1, 1, 6, []string{"db_3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// In the tree's JSON "processes" is the tree; flat's has the count.
			var flat report.InstrFlatReport
			writeJSON(t, p, report.Options{View: "flat", Filter: tt.f}, &flat)
			h := flat.InstrHeader
			if h.Processes != tt.processes || h.Threads != tt.threads || h.Events != tt.events {
				t.Errorf("header: %d processes %d threads %d events, want %d %d %d",
					h.Processes, h.Threads, h.Events, tt.processes, tt.threads, tt.events)
			}
			var tree report.InstrTreeReport
			writeJSON(t, p, report.Options{View: "tree", Filter: tt.f}, &tree)
			var sum float64
			for _, pr := range tree.Processes {
				sum += pr.Percent
			}
			if tt.processes > 0 && (sum < 99.98 || sum > 100.02) {
				t.Errorf("process percentages add up to %v", sum)
			}
			var flow report.CallflowReport
			writeJSON(t, p, report.Options{View: "callflow", Filter: tt.f}, &flow)
			var names []string
			var events uint64
			for _, th := range flow.Threads {
				names = append(names, th.Name)
				for _, e := range th.Events {
					if e.Kind != calltree.FlowPopped && e.Kind != calltree.FlowUnclosed && e.Kind != calltree.FlowEnd {
						events++
					}
				}
			}
			if fmt.Sprint(names) != fmt.Sprint(tt.flows) || events != tt.events {
				t.Errorf("callflow threads %v with %d events, want %v %d", names, events, tt.flows, tt.events)
			}
		})
	}
}

func TestInstrRoot(t *testing.T) {
	p := modeltest.InstrFixture()
	var flat report.InstrFlatReport
	writeJSON(t, p, report.Options{View: "flat", Root: "compute"}, &flat)
	var names []string
	for _, f := range flat.Functions {
		names = append(names, f.Name)
	}
	// memcpy's sample stands for 1.001ms of CPU time: more than compute's.
	if want := "[memcpy compute write helper]"; fmt.Sprint(names) != want || flat.Root != "compute" {
		t.Errorf("functions under compute %v, want %s (root %q)", names, want, flat.Root)
	}
	var buf bytes.Buffer
	err := report.Write(&buf, p, report.Options{View: "tree", Format: "text", Root: "nosuch"})
	if !errors.Is(err, calltree.ErrRootNotFound) || buf.Len() != 0 {
		t.Errorf("unknown root: %v", err)
	}
	// tprof counts samples: a root cannot restrict it.
	err = report.Write(&buf, p, report.Options{View: "tprof", Format: "text", Root: "compute"})
	if !errors.Is(err, report.ErrNotInstrumented) || buf.Len() != 0 {
		t.Errorf("tprof with a root: %v", err)
	}
}

// TestInstrTprof checks that tprof of an instrumented recording counts
// its samples and says so.
func TestInstrTprof(t *testing.T) {
	out := writeText(t, modeltest.InstrFixture(), report.Options{View: "tprof"})
	if !strings.Contains(out, "WARNING: this is an instrumented recording: this report counts only the 2 samples") {
		t.Errorf("tprof:\n%s", out)
	}
}

// TestInstrArcflow checks the stanza relationships that hold for exact
// calls and times on random recordings (recursive, directly and through
// other functions): the callers' calls, base and cum add up to the
// function's calls, self and total, the callees' cum to its total minus
// its self, and flat agrees.
func TestInstrArcflow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 300 {
		p := modeltest.RandomHooks(r, iter%2 == 0)
		if len(p.Events) == 0 {
			continue // a sampling profile
		}
		var arc report.InstrArcflowReport
		writeJSON(t, p, report.Options{View: "arcflow"}, &arc)
		var flat report.InstrFlatReport
		writeJSON(t, p, report.Options{View: "flat"}, &flat)
		if len(arc.Functions) != len(flat.Functions) {
			t.Fatalf("profile %d: %d stanzas, %d flat functions", iter, len(arc.Functions), len(flat.Functions))
		}
		self := map[string]report.InstrFlatFunction{}
		for _, f := range flat.Functions {
			self[f.Name+"@"+f.Module] = f
		}
		for _, s := range arc.Functions {
			where := fmt.Sprintf("profile %d, stanza %s", iter, s.Name)
			var calls, raw uint64
			var base, cum, share float64
			for _, row := range s.Parents {
				calls += row.Calls
				base += row.Base.WallNS
				cum += row.Cum.WallNS
				raw += row.Cum.WallNSRaw
				share += row.SharePercent
			}
			if calls != s.Calls || !near(base, s.Base.WallNS) || !near(cum, s.Cum.WallNS) || raw != s.Cum.WallNSRaw {
				t.Errorf("%s: parents' calls %d base %v cum %v raw %d, self %d %v %v %d", where, calls, base, cum, raw,
					s.Calls, s.Base.WallNS, s.Cum.WallNS, s.Cum.WallNSRaw)
			}
			// The fourth relationship: the children's cum is the
			// function's cum minus its base, recursion included.
			var ccum, cbase float64
			var craw uint64
			for _, row := range s.Children {
				ccum += row.Cum.WallNS
				craw += row.Cum.WallNSRaw
				cbase += row.Base.WallNS
			}
			if !near(ccum, s.Cum.WallNS-s.Base.WallNS) || craw != s.Cum.WallNSRaw-s.Base.WallNSRaw || cbase > ccum+1e-6 {
				t.Errorf("%s: children's cum %v raw %d base %v, self cum %v - base %v (raw %d - %d)", where, ccum, craw, cbase,
					s.Cum.WallNS, s.Base.WallNS, s.Cum.WallNSRaw, s.Base.WallNSRaw)
			}
			if s.Cum.WallNS > 0 && (share < 99.9 || share > 100.1) {
				t.Errorf("%s: parents' shares add up to %v%%", where, share)
			}
			f := self[s.Name+"@"+s.Module]
			if f.Calls != s.Calls || f.Self != s.Base || f.Total != s.Cum {
				t.Errorf("%s: flat %+v disagrees", where, f)
			}
		}
		// The other views render any recording, with every option.
		for _, view := range []string{"tree", "callflow"} {
			for _, format := range report.Formats() {
				o := report.Options{View: view, Format: format, Raw: iter%3 == 0}
				if view == "tree" {
					o.Min = float64(iter % 7)
					if len(p.Switches) > 0 {
						o.Metric = report.MetricNames()[iter%3]
					}
				}
				var buf bytes.Buffer
				if err := report.Write(&buf, p, o); err != nil {
					t.Fatalf("profile %d: %+v: %v", iter, o, err)
				}
				if format == "json" && !json.Valid(buf.Bytes()) {
					t.Fatalf("profile %d: %+v: invalid JSON", iter, o)
				}
			}
		}
	}
}

func near(a, b float64) bool { d := a - b; return d < 1e-6*(1+b) && d > -1e-6*(1+b) }

// TestInstrTextDurations checks that text reports print human-readable
// durations and JSON plain nanoseconds.
func TestInstrTextDurations(t *testing.T) {
	p := modeltest.InstrFixture()
	out := writeText(t, p, report.Options{View: "flat"})
	if !regexp.MustCompile(`\b1\.219ms\b`).MatchString(out) || !strings.Contains(out, "99.75µs") {
		t.Errorf("flat text lacks durations 1.219ms and 99.75µs:\n%s", out)
	}
	var flat report.InstrFlatReport
	writeJSON(t, p, report.Options{View: "flat"}, &flat)
	for _, f := range flat.Functions {
		if f.Name == "main" && f.Self.WallNS != 1_219_200 {
			t.Errorf("main self wall_ns %v, want 1219200", f.Self.WallNS)
		}
	}
}

// TestInstrProbesListed: probes placed while their process ran are
// listed with when, since their early calls were not seen: --root's
// callees, a library's mapped later, an attached process's. A launched
// command's initial probes are placed before its exec, however long that
// took (73 ms on a loaded machine), and are not late.
func TestInstrProbesListed(t *testing.T) {
	p := modeltest.InstrFixture()
	fn := p.Events[0].Function
	for _, th := range p.Threads {
		if th.PID == 1 && th.TID == 1 {
			th.Start = p.Header.StartNS + 80_000_000 // the exec, after placing
		}
	}
	p.Probes = []model.Probe{
		{PID: 1, Time: p.Header.StartNS + 73_000_000, Function: fn, Mech: trace.ProbeEntry},
		{PID: 1, Time: p.Header.StartNS + 73_000_000, Function: fn, Mech: trace.ProbeReturn},
		{PID: 1, Time: p.Header.StartNS + 150_000_000, Function: fn, Mech: trace.ProbeDynamic},
		{PID: 1, Time: p.Header.StartNS + 200_000_000, Function: fn, Mech: trace.ProbeEntry}, // dlopen
		{PID: 3, Time: p.Header.StartNS + 5_000_000, Function: fn, Mech: trace.ProbeReturn},  // attached
	}
	out := writeText(t, p, report.Options{View: "tree"})
	if !strings.Contains(out, "Probes:     5 functions, 3 placed while the program ran") || strings.Contains(out, "+73ms") ||
		!strings.Contains(out, "+150ms") || !strings.Contains(out, "[lazy]") || !strings.Contains(out, "+200ms") || !strings.Contains(out, "+5ms") {
		t.Errorf("probes not listed as placed late, or the launched command's listed:\n%s", out)
	}
	p.Probes = p.Probes[:3]
	// --root held the target while its callee's probe was placed: the
	// caller waited at its entry, so no call was missed.
	p.Pauses = []model.Pause{{Time: p.Header.StartNS + 151_000_000, Duration: 2_000_000}} // 149-151 ms
	if out := writeText(t, p, report.Options{View: "tree"}); !strings.Contains(out, "Probes:     3 functions, none missed a call (1 placed while --root held the target)\n") {
		t.Errorf("a lazy probe placed while --root held the target is listed as late:\n%s", out)
	}
	p.Pauses = nil
	p.Probes = p.Probes[:2]
	if out := writeText(t, p, report.Options{View: "tree"}); !strings.Contains(out, "Probes:     2 functions, all placed before the program ran\n") {
		t.Errorf("a launched command's probes:\n%s", out)
	}
}

// TestInstrDetached: the calls open when the probes came off are counted
// in the header, text and JSON; without any, neither shows them.
func TestInstrDetached(t *testing.T) {
	p := modeltest.InstrFixture()
	out := writeText(t, p, report.Options{View: "flat"})
	h := instrJSON(t, p, report.Options{View: "flat"})
	if strings.Contains(out, "Detach:") || strings.Contains(fmt.Sprint(h["repairs"]), "open_at_detach") {
		t.Errorf("no detach, yet shown:\n%s\n%v", out, h["repairs"])
	}
	// db's last exit (query's, thread 3 runs to the end) never came:
	// the probes came off before it.
	i := slices.IndexFunc(p.Events, func(e model.Event) bool { return e.TID == 3 && !e.Entry && e.Time == 1_300_000 })
	if i < 0 {
		t.Fatal("the fixture changed: no exit of query")
	}
	p.End.Detached = p.Events[i].Time
	p.Events = slices.Delete(p.Events, i, i+1)
	out = writeText(t, p, report.Options{View: "flat"})
	h = instrJSON(t, p, report.Options{View: "flat"})
	if !regexp.MustCompile(`(?m)^Detach: +1 call open when the probes came off: they end then$`).MatchString(out) {
		t.Errorf("text header lacks the detach line:\n%s", out)
	}
	if r, _ := h["repairs"].(map[string]any); r["open_at_detach"] != 1.0 {
		t.Errorf("JSON repairs %v, want open_at_detach 1", h["repairs"])
	}
}

// TestInstrResolution: functions whose calibrated self time per call is
// below the calibration's resolution keep their exact counts but are
// flagged (JSON below_resolution, text ≈ and a legend), and only those;
// a refused calibration flags nothing and says why in the header.
func TestInstrResolution(t *testing.T) {
	p := modeltest.InstrFixture()
	var plain report.InstrFlatReport
	writeJSON(t, p, report.Options{View: "flat"}, &plain)
	perCall := map[string]float64{}
	var lo, hi float64
	for _, f := range plain.Functions {
		if f.Calls == 0 {
			continue
		}
		if f.BelowResolution {
			t.Errorf("%s flagged without a resolution", f.Name)
		}
		v := f.Self.WallNS / float64(f.Calls)
		perCall[f.Name] = v
		if lo == 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	if lo >= hi {
		t.Fatalf("the fixture's functions all take %v ns per call", lo)
	}
	p.Header.Calibration.Resolution = (lo + hi) / 2
	var flat report.InstrFlatReport
	writeJSON(t, p, report.Options{View: "flat"}, &flat)
	below := 0
	for _, f := range flat.Functions {
		want := f.Calls > 0 && perCall[f.Name] < p.Header.Calibration.Resolution
		if f.BelowResolution != want {
			t.Errorf("%s: %v ns per call, resolution %v: below_resolution %v", f.Name, perCall[f.Name], p.Header.Calibration.Resolution, f.BelowResolution)
		}
		if want {
			below++
		}
	}
	out := writeText(t, p, report.Options{View: "flat"})
	if !strings.Contains(out, "≈ marks calls shorter than the calibration's resolution") {
		t.Errorf("no legend:\n%s", out)
	}
	if n := strings.Count(out, "≈") - 1; n != below {
		t.Errorf("%d times marked ≈, want %d:\n%s", n, below, out)
	}
	var tree report.InstrTreeReport
	writeJSON(t, p, report.Options{View: "tree"}, &tree)
	flagged := 0
	var walk func(n *report.InstrTreeNode)
	walk = func(n *report.InstrTreeNode) {
		if n.BelowResolution {
			flagged++
			if n.Base.WallNS/float64(n.Calls) >= p.Header.Calibration.Resolution {
				t.Errorf("tree node %s flagged at %v ns per call", n.Name, n.Base.WallNS/float64(n.Calls))
			}
		}
		for i := range n.Children {
			walk(&n.Children[i])
		}
	}
	for _, pr := range tree.Processes {
		for i := range pr.Threads {
			walk(&pr.Threads[i].Root)
		}
	}
	if flagged == 0 {
		t.Error("no tree node flagged")
	}

	p.Header.Calibration.Refused = "shape mixed residual +7.5%"
	out = writeText(t, p, report.Options{View: "flat"})
	if strings.Contains(out, "≈") || !strings.Contains(out, "calibration refused: shape mixed residual +7.5%") {
		t.Errorf("refused calibration: want no marks and the reason:\n%s", out)
	}
}

// TestInstrSiteCosts: a uprobe calibration's cost per hit of each site
// class is in the header, where its numbers can be compared with
// record's cost warning; a hook calibration has no such line.
func TestInstrSiteCosts(t *testing.T) {
	p := modeltest.InstrFixture()
	if out := writeText(t, p, report.Options{View: "flat"}); strings.Contains(out, "Sites:") {
		t.Errorf("a calibration without site costs has a Sites line:\n%s", out)
	}
	p.Header.Calibration.Sites = &trace.SiteCosts{EntryEmulated: 502, EntryStepped: 14480, ExitReturn: 209.8, ExitRetInsn: 14550}
	out := writeText(t, p, report.Options{View: "flat"})
	want := "Sites:      per hit: entry 502ns emulated, 14.48µs single-stepped; exit 209.8ns return probe, 14.55µs RET probe\n"
	if !strings.Contains(out, want) {
		t.Errorf("header without %q:\n%s", want, out)
	}
}

// TestInstrSwitchCost: the CPU time the preemptions cost, measured in
// the recording and removed, is said in the header; a
// recording whose switched intervals are too few to measure it says
// nothing.
func TestInstrSwitchCost(t *testing.T) {
	out := writeText(t, modeltest.Preempted(16, 8).Profile(), report.Options{View: "flat"})
	want := "Switches:   4ns of CPU a preemption (mean over 8 preempted intervals), 32ns removed from CPU times\n"
	if !strings.Contains(out, want) {
		t.Errorf("header without %q:\n%s", want, out)
	}
	if out := writeText(t, modeltest.Preempted(16, 7).Profile(), report.Options{View: "flat"}); strings.Contains(out, "Switches:") {
		t.Errorf("too few switched intervals have a Switches line:\n%s", out)
	}
}

// TestCallflowJSONIsEncoders: the callflow's JSON, written a thread and
// an event at a time, is what encoding/json writes for the report it
// decodes to, with threads or none, by thread or goroutine.
func TestCallflowJSONIsEncoders(t *testing.T) {
	for _, tt := range []struct {
		p *model.Profile
		o report.Options
	}{
		{modeltest.InstrFixture(), report.Options{}},
		{modeltest.InstrFixture(), report.Options{Raw: true}},
		{modeltest.InstrFixture(), report.Options{Filter: model.Filter{PID: 999, HasPID: true}}},
		{modeltest.GoFixture(), report.Options{By: "goroutine"}},
		{modeltest.GoFixture(), report.Options{By: "thread"}},
	} {
		tt.o.View, tt.o.Format = "callflow", "json"
		var got bytes.Buffer
		if err := report.Write(&got, tt.p, tt.o); err != nil {
			t.Fatal(err)
		}
		var rep report.CallflowReport
		if err := json.Unmarshal(got.Bytes(), &rep); err != nil {
			t.Fatalf("%+v: %v", tt.o, err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		if err := enc.Encode(&rep); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%+v: streamed\n%s\nencoding/json\n%s", tt.o, got.String(), want.String())
		}
		lines := 0
		for _, th := range rep.Threads {
			lines += len(th.Events)
		}
		if tt.o.Filter.HasPID != (lines == 0) {
			t.Errorf("%+v: %d threads, %d lines", tt.o, len(rep.Threads), lines)
		}
	}
}

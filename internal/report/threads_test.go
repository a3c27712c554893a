package report_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
)

// threadsJSON is what the two forms of the threads view share.
type threadsJSON struct {
	Threads []report.ThreadRow `json:"threads"`
	Totals  report.ThreadRow   `json:"totals"`
}

// owner keys a row or a tree by thread incarnation (tid, creation) or
// goroutine.
func owner(tid uint32, start uint64, g *uint64) string {
	if g != nil {
		return fmt.Sprintf("goroutine %d", *g)
	}
	return fmt.Sprintf("tid %d start %d", tid, start)
}

func sameInstr(a, b calltree.Metrics) bool {
	return near(a.WallNS, b.WallNS) && near(a.CPUNS, b.CPUNS) && near(a.DeltaNS, b.DeltaNS) && a.WallNSRaw == b.WallNSRaw &&
		a.Dispatches == b.Dispatches && a.Voluntary == b.Voluntary && a.Involuntary == b.Involuntary &&
		a.Interrupts == b.Interrupts && a.InterruptNS == b.InterruptNS && a.Samples == b.Samples
}

// TestThreadsProperty: on random recordings with thread incarnations,
// switches, interrupts, goroutine switches and samples, the threads
// view's totals equal the sums of its rows and of the per-thread trees:
// the instrumented tree's roots (wall, CPU, dispatches, interrupts,
// samples, events) and the sampling tree's sample counts, row by row.
func TestThreadsProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := range 300 {
		p := modeltest.RandomHooks(r, iter%2 == 0)
		for _, o := range []report.Options{{}, {Raw: true}, {ExcludeInterrupts: true}, {By: "goroutine"},
			{Filter: model.Filter{Thread: "t1*"}}, {By: "goroutine", Filter: model.Filter{Thread: "11"}}} {
			if o.By == "goroutine" && len(p.GoIDs) == 0 {
				continue
			}
			where := fmt.Sprintf("profile %d %+v", iter, o)
			var th threadsJSON
			o.View = "threads"
			writeJSON(t, p, o, &th)

			var sum report.ThreadRow
			rows := map[string]*report.ThreadRow{}
			for i := range th.Threads {
				row := &th.Threads[i]
				sum.Metrics.Add(row.Metrics)
				sum.Events += row.Events
				rows[owner(row.TID, row.StartNS, row.Goroutine)] = row
				if row.Goroutine != nil {
					continue
				}
				if mt := p.ThreadAt(row.PID, row.TID, row.StartNS); mt == nil || mt.Start != row.StartNS ||
					o.Thread != "" && !model.MatchThread(o.Thread, row.TID, mt) {
					t.Errorf("%s: row of %s is no selected incarnation", where, row.Name)
				}
			}
			if !sameInstr(sum.Metrics, th.Totals.Metrics) || sum.Events != th.Totals.Events {
				t.Errorf("%s: rows add up to %+v (%d events), totals %+v (%d)", where, sum.Metrics, sum.Events, th.Totals.Metrics, th.Totals.Events)
			}
			if o.Thread == "" && (th.Totals.Events != uint64(len(p.Events)) || th.Totals.Samples != uint64(len(p.Samples))) {
				t.Errorf("%s: %d events and %d samples, the trace has %d and %d", where, th.Totals.Events, th.Totals.Samples, len(p.Events), len(p.Samples))
			}

			// The instrumented trees, root by root.
			if len(p.Events) > 0 {
				var tree report.InstrTreeReport
				o.View = "tree"
				// The threads view's grouping: by itself the tree of a
				// recording with goroutine switches is by goroutine.
				o.By = cmp.Or(o.By, "thread")
				writeJSON(t, p, o, &tree)
				var roots calltree.Metrics
				var events uint64
				n := 0
				for _, pr := range tree.Processes {
					for _, tt := range pr.Threads {
						roots.Add(tt.Root.Cum)
						events += tt.Events
						n++
						row := rows[owner(tt.TID, tt.Start, tt.Goroutine)]
						if row == nil || !sameInstr(row.Metrics, tt.Root.Cum) || row.Events != tt.Events {
							t.Errorf("%s: tree %s: root %+v (%d events), row %+v", where, tt.Name, tt.Root.Cum, tt.Events, row)
						}
					}
				}
				if !sameInstr(roots, th.Totals.Metrics) || events != th.Totals.Events || n != len(th.Threads) {
					t.Errorf("%s: %d trees add up to %+v (%d events), %d rows to %+v", where, n, roots, events, len(th.Threads), th.Totals.Metrics)
				}
			}

			// The sampling trees of the samples alone.
			s := *p
			s.Events = nil
			var tree report.TreeReport
			o.View = "tree"
			writeJSON(t, &s, o, &tree)
			var samples uint64
			for _, pr := range tree.Processes {
				for _, tt := range pr.Threads {
					samples += tt.Root.Cum.Samples
					row := rows[owner(tt.TID, tt.Start, tt.Goroutine)]
					if row == nil || row.Samples != tt.Root.Cum.Samples {
						t.Errorf("%s: sampling tree %s: %d samples, row %+v", where, tt.Name, tt.Root.Cum.Samples, row)
					}
				}
			}
			if samples != th.Totals.Samples {
				t.Errorf("%s: sampling trees have %d samples, threads %d", where, samples, th.Totals.Samples)
			}
		}
	}
}

// TestThreadsView checks the threads view of the instrumented fixture by
// the JSON keys the issue promises, and its text columns.
func TestThreadsView(t *testing.T) {
	p := modeltest.InstrFixture()
	r := instrJSON(t, p, report.Options{View: "threads"})
	threads := r["threads"].([]any)
	if len(threads) != 4 {
		t.Fatalf("%d rows, want 4 incarnations", len(threads))
	}
	for _, th := range threads {
		th := th.(map[string]any)
		for _, k := range []string{"pid", "tid", "name", "names", "start_ns", "end_ns", "cpu_ns", "wall_ns", "dispatches_voluntary",
			"dispatches_involuntary", "samples", "events", "migrations", "page_faults", "interrupts", "interrupt_ns"} {
			if _, ok := th[k]; !ok {
				t.Errorf("row %v has no %q", th["name"], k)
			}
		}
	}
	io := threads[2].(map[string]any)
	if io["name"] != "io" || fmt.Sprint(io["names"]) != "[worker io]" || io["start_ns"] != 1_400_000.0 || io["end_ns"] != 1_500_000.0 ||
		io["dispatches_voluntary"] != 1.0 || io["events"] != 2.0 {
		t.Errorf("io row %v", io)
	}
	app := threads[0].(map[string]any)
	if app["interrupts"] != 2.0 || app["interrupt_ns"] != 16_000.0 || app["page_faults"] != 120.0 || app["migrations"] != 2.0 ||
		app["wall_ns_raw"] != 1_805_000.0 || app["dispatches_involuntary"] != 1.0 {
		t.Errorf("app row %v", app)
	}

	out := writeText(t, p, report.Options{View: "threads"})
	rows := textRows(t, out)
	if len(rows) != 4 || rows[2]["NAME"] != "worker → io" || rows[2]["START"] != "400µs" || rows[3]["MIG"] != "-" ||
		!strings.Contains(out, "\n  TOTAL                                  3.944ms    3.634ms 100.00%      3      2      1     2    150      2       16µs      2       30  4 rows\n") {
		t.Errorf("rows %v\n%s", rows, out)
	}
	// Excluding interrupts takes their 16µs off app's wall and CPU.
	x := instrJSON(t, p, report.Options{View: "threads", ExcludeInterrupts: true})
	xapp := x["threads"].([]any)[0].(map[string]any)
	if d := app["wall_ns"].(float64) - xapp["wall_ns"].(float64); d != 16_000 || x["exclude_interrupts"] != true {
		t.Errorf("excluding interrupts removed %vns", d)
	}
}

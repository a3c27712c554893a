package web

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
)

// flatJSON decodes the flat report of p, in JSON, into v.
func flatJSON(t *testing.T, p *model.Profile, v any) {
	t.Helper()
	var b bytes.Buffer
	if err := report.Write(&b, p, report.Options{View: "flat", Format: "json"}); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b.Bytes(), v); err != nil {
		t.Fatal(err)
	}
}

// TestBuildRootRecording: a --root recording's page covers the root's
// call subgraph, as its reports and the page's own header do: calls made
// outside the root (placed probes stay) are not the page's.
func TestBuildRootRecording(t *testing.T) {
	p := modeltest.NewHooks().Thread(1, 1, "prog").
		Run(1, 1, "0 +main 10 +b 20 +c 30 -c 40 -b 50 +c 60 -c 70 +c 80 -c 90 -main").Profile()
	p.Header.Root = "b"
	d, err := Build(p, "root")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]uint64{}
	for i, f := range d.Nodes.Func {
		if f >= 0 {
			calls[d.Funcs.Name[f]] += d.Nodes.Calls[i]
		}
	}
	var rep struct {
		Functions []struct {
			Name  string `json:"name"`
			Calls uint64 `json:"calls"`
		} `json:"functions"`
	}
	flatJSON(t, p, &rep)
	want := map[string]uint64{}
	for _, f := range rep.Functions {
		want[f.Name] = f.Calls
	}
	if want["c"] != 1 || calls["c"] != want["c"] || calls["b"] != want["b"] || calls["main"] != want["main"] {
		t.Errorf("calls on the page %v, in the flat report %v: want the root b's subgraph (c called once under it)", calls, want)
	}
}

// TestBuildAggregated: the page's data of a profile whose code is
// grouped (--no-inlines, --granularity) has the reports' entries with the
// reports' numbers, and its header says how code was grouped.
func TestBuildAggregated(t *testing.T) {
	for _, a := range []model.Aggregation{{NoInlines: true}, {Granularity: model.Files}, {Granularity: model.Lines, NoInlines: true}} {
		t.Run(a.String(), func(t *testing.T) {
			p := modeltest.Fixture()
			if err := p.Aggregate(a); err != nil {
				t.Fatal(err)
			}
			d, err := Build(p, "aggregated")
			if err != nil {
				t.Fatal(err)
			}
			type key struct{ name, module string }
			page := map[key]float64{}
			for i, f := range d.Nodes.Func {
				if f >= 0 {
					page[key{d.Funcs.Name[f], d.Modules[d.Funcs.Module[f]]}] += d.Nodes.Base[0][i]
				}
			}
			var rep struct {
				Granularity string `json:"granularity"`
				NoInlines   bool   `json:"no_inlines"`
				Functions   []struct {
					calltree.Func
					Self calltree.Count `json:"self"`
				} `json:"functions"`
			}
			flatJSON(t, p, &rep)
			if len(rep.Functions) == 0 {
				t.Fatal("empty flat report")
			}
			for _, f := range rep.Functions {
				if got := page[key{f.Name, f.Module}]; got != float64(f.Self.Samples) {
					t.Errorf("%s (%s): self %g on the page, %d in the flat report", f.Name, f.Module, got, f.Self.Samples)
				}
				delete(page, key{f.Name, f.Module})
			}
			for k, v := range page {
				if v != 0 {
					t.Errorf("%s (%s): self %g on the page only", k.name, k.module, v)
				}
			}
			if inlined := slices.Contains(d.Funcs.Name, "inl_helper"); a.Granularity == model.Functions && inlined == a.NoInlines {
				t.Errorf("inlined function inl_helper on the page: %v, want %v", inlined, !a.NoInlines)
			}
			if files := slices.Contains(d.Funcs.Name, "src/compute.c"); files != (a.Granularity == model.Files) {
				t.Errorf("file src/compute.c an entry of the page: %v, want %v", files, !files)
			}
			var h struct {
				Granularity string `json:"granularity"`
				NoInlines   bool   `json:"no_inlines"`
			}
			if err := json.Unmarshal(d.Header, &h); err != nil {
				t.Fatal(err)
			}
			want := ""
			if a.Granularity != model.Functions {
				want = a.Granularity.String()
			}
			if rep.Granularity != want || rep.NoInlines != a.NoInlines || h.Granularity != want || h.NoInlines != a.NoInlines {
				t.Errorf("header granularity %q, no_inlines %v in the flat report, %q, %v on the page; want %q, %v",
					rep.Granularity, rep.NoInlines, h.Granularity, h.NoInlines, want, a.NoInlines)
			}
		})
	}
}

// TestFunctionTablesShared: selections of the same threads share one
// table, and every table is the engine's over its threads: a thread's
// table has the calls of calltree.Build under that thread's filter.
func TestFunctionTablesShared(t *testing.T) {
	p := modeltest.InstrFixture()
	d, err := Build(p, "tables")
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range d.Scopes {
		if k < 0 || k >= len(d.Tables) {
			t.Fatalf("scope %s names table %d of %d", name, k, len(d.Tables))
		}
	}
	// A process whose threads are all the page's shares the table of all.
	for _, pr := range d.Processes {
		if !slices.ContainsFunc(d.Threads, func(o Thread) bool { return o.PID != pr.PID }) && d.Scopes["p:"+strconv.Itoa(int(pr.PID))] != d.Scopes["all"] {
			t.Errorf("pid %d has every thread but a table of its own", pr.PID)
		}
	}
	one, err := Build(modeltest.NewHooks().Thread(1, 1, "prog").Run(1, 1, "0 +main 10 +b 20 -b 30 -main").Profile(), "one thread")
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Tables) != 1 || len(one.Scopes) != 3 {
		t.Errorf("one thread: %d tables for scopes %v, want one for all, p:1 and t:0", len(one.Tables), one.Scopes)
	}
	for i, th := range d.Threads {
		// The filter merges a reused tid's incarnations; the page keeps
		// them apart. Compare the unique ones.
		if slices.IndexFunc(d.Threads, func(o Thread) bool { return o != th && o.PID == th.PID && o.TID == th.TID }) >= 0 {
			continue
		}
		res, err := calltree.Build(p, calltree.Options{Filter: modeltest.Matcher(t, model.Filter{PID: th.PID, HasPID: true, TID: th.TID, HasTID: true})})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]uint64{}
		for _, f := range res.Functions {
			want[f.Name] = f.Calls
		}
		tab := d.Tables[d.Scopes["t:"+strconv.Itoa(i)]]
		got := map[string]uint64{}
		for r, f := range tab.Func {
			got[d.Funcs.Name[f]] = tab.Calls[r]
		}
		if !maps.Equal(got, want) {
			t.Errorf("thread %d: calls %v, want %v", th.TID, got, want)
		}
	}
}

// TestBuildAggregateRecording: the page of an aggregated recording (record
// --aggregate; ../export/testdata/aggregated.trace: main calls mid
// 20,000 times, mid calls leaf twice) shows its trees' calls, as an
// instrumented recording's, loaded and streamed alike: it has no events,
// and as a sampling recording it showed no calls.
func TestBuildAggregateRecording(t *testing.T) {
	p, s := modeltest.OpenBoth(t, "../export/testdata/aggregated.trace")
	d, err := Build(p, "agg")
	if err != nil {
		t.Fatal(err)
	}
	var calls uint64
	for _, c := range d.Nodes.Calls {
		calls += c
	}
	if d.Kind != "instrumented" || calls != 60001 {
		t.Errorf("kind %q, %d calls; want instrumented, 60001", d.Kind, calls)
	}
	ds, err := BuildStream(s, "agg")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(d)
	b, _ := json.Marshal(ds)
	if !bytes.Equal(a, b) {
		t.Error("the streamed page's data differ from the loaded one's")
	}
}

// TestBuildSharesByPeriod: the page of an event whose period adapts
// shows the period first, the metric the reports' shares weigh by
// (report.Header.ShareBy), with the nodes' columns in the same order; a
// clock event's page shows samples first.
func TestBuildSharesByPeriod(t *testing.T) {
	for _, event := range []string{"page-faults", "cpu-clock"} {
		p := modeltest.New().Thread(1, 1, "app").Add(1, 1, "main;startup", 8).Add(1, 1, "main;memset", 2).Profile()
		p.Header.Event, p.Header.Freq, p.Header.Period = event, 999, 0
		for i := range p.Samples {
			p.Samples[i].Period = uint64(1 + 999*(i/8)) // 8 of 1, 2 of 1000
		}
		d, err := Build(p, event)
		if err != nil {
			t.Fatal(err)
		}
		first := "samples"
		if event == "page-faults" {
			first = "period"
		}
		if d.Metrics[0].Key != first {
			t.Errorf("%s: metrics %+v, want %s first", event, d.Metrics, first)
		}
		for i, f := range d.Nodes.Func {
			if f >= 0 && d.Funcs.Name[f] == "memset" {
				want := map[string]float64{"samples": 2, "period": 2000}
				if got := []float64{d.Nodes.Base[0][i], d.Nodes.Base[1][i]}; got[0] != want[d.Metrics[0].Key] || got[1] != want[d.Metrics[1].Key] {
					t.Errorf("%s: memset's columns %v for metrics %+v", event, got, d.Metrics)
				}
			}
		}
	}
}

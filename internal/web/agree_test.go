package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
)

// fnStats is one function as the page computes it, or as the Go
// reports do, keyed by name and module; Self and Total hold every metric
// in Data.Metrics order.
type fnStats struct {
	Self, Total      []float64
	Calls, Min, Max  float64
	Callers, Callees map[string]arcStats
}

type arcStats struct {
	Calls     float64
	Base, Cum []float64
}

// pageFunctions is evaluated in the page: the functions of a scope with
// their callers and callees, as the table and the detail show them.
const pageFunctions = `((scope) => {
  const m = TP.app.model, agg = m.aggregate(scope), nm = m.base.length;
  const key = (f) => m.name(f) + "\u0000" + m.module(f);
  const col = (a, f) => a.map((c) => c[f]);
  const arcs = (list) => Object.fromEntries(list.map((a) => [key(a.func), {Calls: a.calls, Base: [...a.base], Cum: [...a.cum]}]));
  const out = {};
  for (const f of agg.rows) {
    out[key(f)] = {Self: col(agg.self, f), Total: col(agg.total, f), Calls: agg.calls[f], Min: agg.min[f], Max: agg.max[f],
      Callers: arcs(m.callers(f, scope)), Callees: arcs(m.callees(f, scope))};
  }
  return out;
})`

func pageStats(t *testing.T, ctx context.Context, scope string) map[string]fnStats {
	t.Helper()
	return eval[map[string]fnStats](t, ctx, fmt.Sprintf("%s(%q)", pageFunctions, scope))
}

// samplingStats is what report's arcflow view says: its stanzas' self
// BASE and CUM are flat's SELF and TOTAL, its parents and children the
// callers and callees.
func samplingStats(t *testing.T, p *model.Profile, f model.Filter) map[string]fnStats {
	t.Helper()
	var b bytes.Buffer
	if err := report.Write(&b, p, report.Options{View: "arcflow", Format: "json", Filter: f}); err != nil {
		t.Fatal(err)
	}
	type metrics struct{ Samples, Period float64 }
	type row struct {
		Name, Module string
		Base, Cum    metrics
	}
	var doc struct {
		Functions []struct {
			row
			Parents, Children []row
		}
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	vec := func(m metrics) []float64 { return []float64{m.Samples, m.Period} }
	arcs := func(rows []row) map[string]arcStats {
		out := map[string]arcStats{}
		for _, r := range rows {
			out[r.Name+"\x00"+r.Module] = arcStats{Base: vec(r.Base), Cum: vec(r.Cum)}
		}
		return out
	}
	out := map[string]fnStats{}
	for _, s := range doc.Functions {
		out[s.Name+"\x00"+s.Module] = fnStats{Self: vec(s.Base), Total: vec(s.Cum), Callers: arcs(s.Parents), Callees: arcs(s.Children)}
	}
	return out
}

// instrStats is what calltree.Build's Functions say.
func instrStats(t *testing.T, p *model.Profile, o calltree.Options) map[string]fnStats {
	t.Helper()
	res, err := calltree.Build(p, o)
	if err != nil {
		t.Fatal(err)
	}
	vec := func(m calltree.Metrics) []float64 {
		return []float64{m.WallNS, m.CPUNS, float64(m.Dispatches), float64(m.Samples)}
	}
	arcs := func(as []calltree.Arc) map[string]arcStats {
		out := map[string]arcStats{}
		for _, a := range as {
			out[a.Name+"\x00"+a.Module] = arcStats{Calls: float64(a.Calls), Base: vec(a.Base), Cum: vec(a.Cum)}
		}
		return out
	}
	out := map[string]fnStats{}
	for _, f := range res.Functions {
		out[f.Name+"\x00"+f.Module] = fnStats{Self: vec(f.Self), Total: vec(f.Total), Calls: float64(f.Calls),
			Min: f.MinSelfNS, Max: f.MaxSelfNS, Callers: arcs(f.Callers), Callees: arcs(f.Callees)}
	}
	return out
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-6*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func nearAll(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !near(a[i], b[i]) {
			return false
		}
	}
	return true
}

// compareStats reports every difference between the page's numbers and
// the Go reports'.
func compareStats(t *testing.T, what string, got, want map[string]fnStats, calls bool) {
	t.Helper()
	name := func(k string) string { return strings.ReplaceAll(k, "\x00", " @") }
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: page lacks %s", what, name(k))
			continue
		}
		if !nearAll(g.Self, w.Self) || !nearAll(g.Total, w.Total) {
			t.Errorf("%s: %s self %v total %v, want %v %v", what, name(k), g.Self, g.Total, w.Self, w.Total)
		}
		if calls && (!near(g.Calls, w.Calls) || !near(g.Min, w.Min) || !near(g.Max, w.Max)) {
			t.Errorf("%s: %s calls/min/max %v %v %v, want %v %v %v", what, name(k), g.Calls, g.Min, g.Max, w.Calls, w.Min, w.Max)
		}
		for _, side := range []struct {
			dir       string
			got, want map[string]arcStats
		}{{"caller", g.Callers, w.Callers}, {"callee", g.Callees, w.Callees}} {
			// The page leaves out arcs with nothing on them.
			for ak, wa := range side.want {
				if wa.Calls == 0 && nearAll(wa.Base, make([]float64, len(wa.Base))) && nearAll(wa.Cum, make([]float64, len(wa.Cum))) {
					delete(side.want, ak)
				}
			}
			if len(side.got) != len(side.want) {
				t.Errorf("%s: %s has %d %ss, want %d", what, name(k), len(side.got), side.dir, len(side.want))
			}
			for ak, wa := range side.want {
				ga := side.got[ak]
				if !nearAll(ga.Base, wa.Base) || !nearAll(ga.Cum, wa.Cum) || (calls && !near(ga.Calls, wa.Calls)) {
					t.Errorf("%s: %s %s %s: calls %v base %v cum %v, want %v %v %v", what, name(k), side.dir, name(ak), ga.Calls, ga.Base, ga.Cum, wa.Calls, wa.Base, wa.Cum)
				}
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: page has %s, the reports do not", what, name(k))
		}
	}
}

// TestBrowserAgreesWithReports checks, in Chromium, that the numbers the
// page derives (functions table, callers and callees with their shares)
// are the text reports' own: report's arcflow for sampling profiles,
// calltree.Build's functions for instrumented ones, over the fixtures and
// random profiles, for every process and for each thread.
func TestBrowserAgreesWithReports(t *testing.T) {
	ctx := browser(t)
	type fixture struct {
		name string
		p    *model.Profile
	}
	fixtures := []fixture{{"sampling fixture", modeltest.Fixture()}, {"instrumented fixture", modeltest.InstrFixture()}}
	// The page of a profile whose code is grouped otherwise (--no-inlines,
	// --granularity) agrees with the reports of that profile.
	for _, a := range []model.Aggregation{{Granularity: model.Lines, NoInlines: true}, {Granularity: model.Files}} {
		for _, fx := range []fixture{{"sampling fixture", modeltest.Fixture()}, {"instrumented fixture", modeltest.InstrFixture()}} {
			if err := fx.p.Aggregate(a); err != nil {
				t.Fatal(err)
			}
			fixtures = append(fixtures, fixture{fx.name + " by " + a.String(), fx.p})
		}
	}
	r := rand.New(rand.NewPCG(3, 5))
	for i := range 4 {
		fixtures = append(fixtures, fixture{fmt.Sprintf("random sampling %d", i), modeltest.RandomSamples(r)},
			fixture{fmt.Sprintf("random instrumented %d", i), modeltest.RandomHooks(r, i%2 == 0)})
	}
	for _, fx := range fixtures {
		srv := httptest.NewServer(NewHandler(fx.p, fx.name))
		run(t, ctx, "loading "+fx.name, chromedp.Navigate(srv.URL+"/"), waitFor(`body[data-ready="1"]`))
		d, err := Build(fx.p, "")
		if err != nil {
			t.Fatal(err)
		}
		instrumented := len(fx.p.Events) > 0
		want := func(f model.Filter) map[string]fnStats {
			if instrumented {
				return instrStats(t, fx.p, calltree.Options{Filter: modeltest.Matcher(t, model.Filter{PID: f.PID, HasPID: f.HasPID, TID: f.TID, HasTID: f.HasTID})})
			}
			return samplingStats(t, fx.p, f)
		}
		compareStats(t, fx.name+" (all)", pageStats(t, ctx, "all"), want(model.Filter{}), instrumented)
		for _, pr := range d.Processes {
			compareStats(t, fmt.Sprintf("%s (pid %d)", fx.name, pr.PID), pageStats(t, ctx, fmt.Sprint("p:", pr.PID)), want(model.Filter{PID: pr.PID, HasPID: true}), instrumented)
		}
		for i, th := range d.Threads {
			// The reports filter by tid, which merges a reused tid's
			// incarnations; the page keeps them apart. Compare the unique ones.
			reused := false
			for j, o := range d.Threads {
				reused = reused || (j != i && o.PID == th.PID && o.TID == th.TID)
			}
			if reused {
				continue
			}
			f := model.Filter{PID: th.PID, HasPID: true, TID: th.TID, HasTID: true}
			compareStats(t, fmt.Sprintf("%s (tid %d)", fx.name, th.TID), pageStats(t, ctx, fmt.Sprint("t:", i)), want(f), instrumented)
		}
		srv.Close()
	}
}

// TestBrowserLargeProfile loads a synthetic profile of 101,001 functions
// and measures, in Chromium, how long the page takes to be ready and to
// sort, filter and scroll the functions table. Its 1,000 callers' times
// fall off as 1/rank, as real profiles' do, so about 30 functions pass
// the initial time filter.
func TestBrowserLargeProfile(t *testing.T) {
	const n = 100_000
	b := modeltest.New().Thread(1, 1, "big")
	for i := range n {
		b.Add(1, 1, fmt.Sprintf("main;g%d;f%d", i/100, i), 1+300/(1+i/100))
	}
	p := b.Profile()
	ctx := browser(t)
	h := NewHandler(p, "large")
	_, blob, err := h.load()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	start := time.Now()
	run(t, ctx, "loading", chromedp.Navigate(srv.URL+"/"), waitFor(`body[data-ready="1"]`))
	load := time.Since(start)
	initMS := eval[string](t, ctx, `document.body.dataset.initMs`)
	count := eval[string](t, ctx, `document.getElementById("table-count").textContent`)
	if !strings.HasPrefix(count, "101,001 of 101,001") {
		t.Errorf("table count %q, want 101,001 functions", count)
	}
	rowsInDOM := eval[int](t, ctx, `document.querySelectorAll("#table-rows .vrow").length`)
	if rowsInDOM == 0 || rowsInDOM > 200 {
		t.Errorf("%d rows in the DOM: want the visible ones only", rowsInDOM)
	}
	// The time filter starts where about 30 functions show (the call graph's initial time filter).
	run(t, ctx, "the initial call graph", waitFor(`#graph-view svg g.node`))
	graphNodes := eval[int](t, ctx, `+document.getElementById("graph-view").dataset.nodes`)
	graphFilter := eval[string](t, ctx, `document.getElementById("graph-view").dataset.filter`)
	if graphNodes < 15 || graphNodes > 60 || graphFilter == "0" {
		t.Errorf("initial call graph: %d functions at filter %s%%, want about 30 at a filter above 0", graphNodes, graphFilter)
	}
	clickMS := func(key string) float64 {
		return eval[float64](t, ctx, fmt.Sprintf(`(() => { const t = performance.now(); document.querySelector('.vhead [data-key="%s"]').click(); return performance.now() - t; })()`, key))
	}
	sortTotal := clickMS("total")
	if first := eval[string](t, ctx, `document.querySelector("#table-rows .vrow").dataset.name`); first != "main" {
		t.Errorf("sorted by total: first row %q, want main", first)
	}
	sortName := clickMS("name")
	sortSelf := clickMS("selfpct")
	run(t, ctx, "filtering", chromedp.SendKeys(chromedp.CSS("#filter"), "^f9999"))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.HasPrefix(eval[string](t, ctx, `document.getElementById("table-count").textContent`), "11 of") {
		if time.Now().After(deadline) {
			t.Fatalf("filter ^f9999: table count %q", eval[string](t, ctx, `document.getElementById("table-count").textContent`))
		}
		time.Sleep(50 * time.Millisecond)
	}
	filterMS := eval[string](t, ctx, `document.getElementById("table").dataset.refreshMs`)
	run(t, ctx, "clearing the filter", js(`(() => { document.getElementById("filter").value = ""; TP.app.table.setFilter(""); })()`))
	scrollMS := eval[float64](t, ctx, `(() => { const b = document.getElementById("table-body"); const t = performance.now(); b.scrollTop = b.scrollHeight; b.dispatchEvent(new Event("scroll")); return performance.now() - t; })()`)
	last := eval[string](t, ctx, `[...document.querySelectorAll("#table-rows .vrow")].pop().dataset.name`)
	if last == "" {
		t.Errorf("scrolled to the end: no rows drawn")
	}
	screenshot(t, ctx, "large-table")
	t.Logf("101,001 functions: data.json %d bytes; page ready in %v (model + first table %s ms); sort by total %.0f ms, by name %.0f ms, by self %.0f ms; regex filter %s ms; scroll to end %.1f ms; %d rows in the DOM; initial call graph %d functions at %s%%",
		len(blob), load.Round(time.Millisecond), initMS, sortTotal, sortName, sortSelf, filterMS, scrollMS, rowsInDOM, graphNodes, graphFilter)
	if sortTotal > 3000 || sortName > 3000 {
		t.Errorf("sorting 101,001 functions took %.0f ms (total) and %.0f ms (name): want under 3 s", sortTotal, sortName)
	}
}

// TestBrowserHTMLSelection writes HTML files with report's --pid, --tid
// and --thread filters: the page opens with the threads they match
// selected, with the numbers of the text reports under the same filter,
// and its thread selector can still go back to all threads.
func TestBrowserHTMLSelection(t *testing.T) {
	ctx := browser(t)
	type fixture struct {
		name   string
		p      *model.Profile
		filter model.Filter
	}
	fixtures := []fixture{
		{"sampling fixture, --thread w*", modeltest.Fixture(), model.Filter{Thread: "w*"}},
		{"sampling fixture, --pid 100", modeltest.Fixture(), model.Filter{PID: 100, HasPID: true}},
		{"instrumented fixture, --thread *", modeltest.InstrFixture(), model.Filter{Thread: "*"}},
	}
	r := rand.New(rand.NewPCG(7, 9))
	for i := range 2 {
		fixtures = append(fixtures, fixture{fmt.Sprintf("random sampling %d, --thread t[01]", i), modeltest.RandomSamples(r), model.Filter{Thread: "t[01]"}},
			fixture{fmt.Sprintf("random instrumented %d, --tid 10", i), modeltest.RandomHooks(r, i%2 == 0), model.Filter{TID: 10, HasTID: true}})
	}
	for _, fx := range fixtures {
		var html bytes.Buffer
		if err := WriteHTML(&html, fx.p, HTMLOptions{Title: fx.name, Filter: fx.filter, FilterLabel: "the filter"}); err != nil {
			t.Errorf("%s: %v", fx.name, err)
			continue
		}
		path := filepath.Join(t.TempDir(), "report.html")
		if err := os.WriteFile(path, html.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, ctx, "loading "+fx.name, chromedp.Navigate("file://"+path), waitFor(`body[data-ready="1"]`))
		scope := eval[[]string](t, ctx, `[document.getElementById("scope").value, document.getElementById("scope").selectedOptions[0].textContent]`)
		if scope[0] != "sel" || !strings.HasPrefix(scope[1], "the filter (") {
			t.Errorf("%s: the page opens with threads %q, want the filter's", fx.name, scope)
		}
		instrumented := len(fx.p.Events) > 0
		var want map[string]fnStats
		if instrumented {
			f := fx.filter
			want = instrStats(t, fx.p, calltree.Options{Filter: modeltest.Matcher(t, f)})
		} else {
			want = samplingStats(t, fx.p, fx.filter)
		}
		compareStats(t, fx.name, pageStats(t, ctx, "sel"), want, instrumented)
		shown := eval[string](t, ctx, `document.getElementById("table-count").textContent`)
		run(t, ctx, fx.name+": all threads", setSelect("#scope", "all"))
		if all := eval[string](t, ctx, `document.getElementById("table-count").textContent`); all == "" {
			t.Errorf("%s: no table for all threads (filtered: %s)", fx.name, shown)
		}
	}
	var html bytes.Buffer
	if err := WriteHTML(&html, modeltest.Fixture(), HTMLOptions{Filter: model.Filter{Thread: "nothing"}}); err == nil {
		t.Error("a filter matching no thread: no error")
	}
}

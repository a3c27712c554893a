package web

// End-to-end tests of the call graph's requirements (issue 5, the call
// graph as a river of time) on synthetic profiles whose times are known: arc widths under
// each weighting and under a virtual root, the recursion marks, the three
// detail states of a node and the initial time filter.

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// graphFixture is a sampling profile of 1,000 samples in one thread, so
// that an arc's share of the root is its samples / 1000:
//
//	main (1000) → work (300) → compute (200) → tiny (5)
//	                         → io (80)
//	            → parse (60) → parse → parse        direct recursion
//	            → eval (30) → apply → eval → apply → leaf   indirect recursion
//	            → init (1)
func graphFixture() *model.Profile {
	b := modeltest.New().Thread(1, 1, "graph")
	b.Add(1, 1, "main;work;compute", 195).
		Add(1, 1, "main;work;compute;tiny", 5).
		Add(1, 1, "main;work;io", 80).
		Add(1, 1, "main;work", 20).
		Add(1, 1, "main;parse;parse;parse", 60).
		Add(1, 1, "main;eval;apply;eval;apply;leaf", 30).
		Add(1, 1, "main;init", 1).
		Add(1, 1, "main", 609)
	return b.Profile()
}

// graphArc is an arc of graphFixture with the samples its callee spent
// in calls from its caller ("" is the root, <all threads>).
type graphArc struct {
	from, to string
	cum      int
}

// wantWidth is the arc width the call graph gives an arc carrying cum of the
// root's rootCum: none 1; linear the share rounded up to the next 10%,
// divided by 10% (computed on integers, so exactly); logarithmic
// min(9, max(1, log2(1000·T + 0.0001))).
func wantWidth(weighting string, cum, rootCum int) float64 {
	switch weighting {
	case "none":
		return 1
	case "linear":
		return float64(max(1, min(10, (10*cum+rootCum-1)/rootCum)))
	default:
		T := float64(cum) / float64(rootCum)
		return math.Min(9, math.Max(1, math.Log2(1000*T+0.0001)))
	}
}

// graphEdgeWidths returns the stroke width of each arc Graphviz drew,
// by the edge's id (e<caller>_<callee>, -1 the root); Graphviz leaves
// out a width of 1.
const graphEdgeWidths = `Object.fromEntries([...document.querySelectorAll("#graph-view g.edge")].map(e => [e.id, +(e.querySelector("path").getAttribute("stroke-width") || 1)]))`

// graphNode is a function node of the graph as drawn: its detail
// state, whether it is marked recursive, its label and how many outlines
// Graphviz drew for it (a double border is two).
type graphNode struct {
	State     string
	Recursive bool
	Label     string
	Outlines  int
}

// graphNodesJS returns the function nodes shown (not the root) by name.
const graphNodesJS = `Object.fromEntries([...document.querySelectorAll("#graph-view g.node")].filter(g => g.dataset.f !== "-1").map(g => [g.dataset.name, {
  State: g.dataset.state, Recursive: g.classList.contains("recursive"),
  Label: [...g.querySelectorAll("text")].map(t => t.textContent).join("\n"),
  Outlines: g.querySelectorAll(":scope > path, :scope > polygon, :scope > a > path, :scope > a > polygon, :scope > g > a > path, :scope > g > a > polygon").length,
}]))`

// rendered waits until the graph shows the render with these
// attributes of #graph-view (data-weighting, data-root, ...).
func rendered(attrs ...string) chromedp.Action[chromedp.Void] {
	sel := "#graph-view"
	for i := 0; i+1 < len(attrs); i += 2 {
		sel += fmt.Sprintf(`[data-%s=%q]`, attrs[i], attrs[i+1])
	}
	return waitFor(sel + " svg g.node")
}

// TestBrowserGraphArcWidths checks each drawn arc's stroke width against
// the seed's formulas for no, linear and logarithmic weighting, with T
// the callee's cum in calls from the caller as a share of the root's:
// first of all threads, then of work made the virtual root.
func TestBrowserGraphArcWidths(t *testing.T) {
	p := graphFixture()
	ctx := browser(t)
	for _, pg := range bothPages(t, p, "graph widths") {
		run(t, ctx, pg.name+": loading", chromedp.Navigate(pg.url), waitFor(`body[data-ready="1"]`), rendered("root", "-1"))
		idx := map[string]int{"": -1}
		for _, name := range []string{"main", "work", "compute", "tiny", "io", "parse", "eval", "apply", "leaf", "init"} {
			idx[name] = funcIndex(t, ctx, name)
		}
		if f := eval[string](t, ctx, `document.getElementById("graph-view").dataset.filter`); f != "0" {
			t.Fatalf("%s: 10 functions, initial filter %s%%, want 0 (all arcs)", pg.name, f)
		}
		check := func(what, weighting string, rootCum int, arcs []graphArc, hidden []string) {
			t.Helper()
			got := eval[map[string]float64](t, ctx, graphEdgeWidths)
			if len(got) != len(arcs) {
				t.Errorf("%s, %s: %d arcs drawn (%v), want %d", what, weighting, len(got), got, len(arcs))
			}
			for _, a := range arcs {
				id := fmt.Sprintf("e%d_%d", idx[a.from], idx[a.to])
				w, ok := got[id]
				want := wantWidth(weighting, a.cum, rootCum)
				// The page gives Graphviz the width to 0.01 point.
				if !ok || math.Abs(w-want) > 0.0051 {
					t.Errorf("%s, %s: arc %s→%s (T = %d/%d) has width %v (drawn %v), want %.4f", what, weighting, cmp.Or(a.from, "<all threads>"), a.to, a.cum, rootCum, w, ok, want)
				}
			}
			names := eval[map[string]graphNode](t, ctx, graphNodesJS)
			for _, h := range hidden {
				if _, ok := names[h]; ok {
					t.Errorf("%s: %s shown, want only the root's callees", what, h)
				}
			}
		}

		all := []graphArc{
			{"", "main", 1000}, {"main", "work", 300}, {"work", "compute", 200}, {"compute", "tiny", 5},
			{"work", "io", 80}, {"main", "parse", 60}, {"main", "eval", 30}, {"eval", "apply", 30},
			{"apply", "leaf", 30}, {"main", "init", 1},
			// apply → eval and parse → parse go back into a recursion:
			// their time is counted where it was entered, they carry none
			// and show only in the all state.
		}
		for _, w := range []string{"none", "linear", "log"} {
			run(t, ctx, pg.name+": weighting "+w, setSelect("#graph-weight", w), rendered("weighting", w, "root", "-1"))
			check(pg.name+", root <all threads>", w, 1000, all, nil)
			screenshot(t, ctx, fmt.Sprintf("graph-widths-%s-%s", pg.name, w))
		}

		// work as the virtual root: its 300 samples are T = 1.
		rooted := []graphArc{{"work", "compute", 200}, {"compute", "tiny", 5}, {"work", "io", 80}}
		root := fmt.Sprint(idx["work"])
		run(t, ctx, pg.name+": making work the root", click(`.vrow[data-name="work"]`), click("#graph-root"), rendered("root", root))
		for _, w := range []string{"none", "linear", "log"} {
			run(t, ctx, pg.name+": rooted, weighting "+w, setSelect("#graph-weight", w), rendered("weighting", w, "root", root))
			check(pg.name+", root work", w, 300, rooted, []string{"main", "parse", "eval", "init"})
			screenshot(t, ctx, fmt.Sprintf("graph-widths-%s-root-work-%s", pg.name, w))
		}
		run(t, ctx, pg.name+": resetting the root", click("#graph-unroot"), rendered("root", "-1"))
		if w := eval[map[string]float64](t, ctx, graphEdgeWidths)[fmt.Sprintf("e%d_%d", idx["work"], idx["compute"])]; math.Abs(w-wantWidth("log", 200, 1000)) > 0.0051 {
			t.Errorf("%s: after reset root, work→compute has width %v, want %.4f again", pg.name, w, wantWidth("log", 200, 1000))
		}
	}
}

// TestBrowserGraphRecursion checks the recursion marks: parse calls
// itself, eval and apply call each other (eval;apply;eval;apply), main,
// work and leaf are not recursive.
func TestBrowserGraphRecursion(t *testing.T) {
	p := graphFixture()
	ctx := browser(t)
	srv := httptest.NewServer(NewHandler(p, "graph recursion"))
	defer srv.Close()
	run(t, ctx, "loading", chromedp.Navigate(srv.URL+"/"), waitFor(`body[data-ready="1"]`), rendered("root", "-1"))
	nodes := eval[map[string]graphNode](t, ctx, graphNodesJS)
	plain := nodes["main"].Outlines
	for name, rec := range map[string]bool{"parse": true, "eval": true, "apply": true, "main": false, "work": false, "leaf": false} {
		n, ok := nodes[name]
		switch {
		case !ok:
			t.Errorf("%s not shown", name)
		case n.Recursive != rec || strings.Contains(n.Label, "↻") != rec:
			t.Errorf("%s: class recursive %v, label %q; want recursive %v (↻ in the label)", name, n.Recursive, n.Label, rec)
		case rec && n.Outlines <= plain:
			t.Errorf("%s: %d outlines, main has %d: want a double border", name, n.Outlines, plain)
		}
	}
	screenshot(t, ctx, "graph-recursion")

	// apply's arc back to eval carries no time of its own: drawn in the
	// all state only, at the least width.
	back := fmt.Sprintf("e%d_%d", funcIndex(t, ctx, "apply"), funcIndex(t, ctx, "eval"))
	if _, ok := eval[map[string]float64](t, ctx, graphEdgeWidths)[back]; ok {
		t.Errorf("apply → eval drawn with apply in the filtered state, want it hidden (no time)")
	}
	run(t, ctx, "apply: all callees", click(`.vrow[data-name="apply"]`), click("#graph-expand"),
		waitFor(`#graph-view g.node[data-name="apply"][data-state="all"]`))
	if w, ok := eval[map[string]float64](t, ctx, graphEdgeWidths)[back]; !ok || w != 1 {
		t.Errorf("apply → eval with apply in the all state: width %v (drawn %v), want 1", w, ok)
	}
	screenshot(t, ctx, "graph-recursion-apply-all")
}

// TestBrowserGraphNodeStates steps main through its three detail states
// at a 5% filter and counts the nodes at each: collapsed shows none of
// its callees, filtered those with at least 5% (work, parse; work's own
// compute and io), all of them (also eval and init; eval's apply, 3%,
// stays filtered out).
func TestBrowserGraphNodeStates(t *testing.T) {
	p := graphFixture()
	ctx := browser(t)
	srv := httptest.NewServer(NewHandler(p, "graph states"))
	defer srv.Close()
	run(t, ctx, "loading", chromedp.Navigate(srv.URL+"/"), waitFor(`body[data-ready="1"]`), rendered("root", "-1"),
		setSelect("#graph-filter-num", "5"), rendered("filter", "5"),
		click(`.vrow[data-name="main"]`), waitFor(`#graph-view g.node.selected[data-name="main"]`))
	shown := func() []string {
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range eval[map[string]graphNode](t, ctx, graphNodesJS) {
				if !yield(n) {
					return
				}
			}
		})
		if n := eval[int](t, ctx, `+document.getElementById("graph-view").dataset.nodes`); n != len(names)+1 {
			t.Errorf("data-nodes %d, want %d functions and the root", n, len(names))
		}
		return names
	}
	filtered := []string{"compute", "io", "main", "parse", "work"}
	steps := []struct {
		what, button, state, mark string
		want                      []string
	}{
		{"initially", "", "filtered", "◐", filtered},
		{"collapse", "#graph-collapse", "collapsed", "▶", []string{"main"}},
		{"collapse again", "#graph-collapse", "collapsed", "▶", []string{"main"}},
		{"expand", "#graph-expand", "filtered", "◐", filtered},
		{"expand", "#graph-expand", "all", "▷", []string{"compute", "eval", "init", "io", "main", "parse", "work"}},
		{"expand again", "#graph-expand", "all", "▷", []string{"compute", "eval", "init", "io", "main", "parse", "work"}},
	}
	for i, s := range steps {
		if s.button != "" {
			next := eval[int](t, ctx, `+document.getElementById("graph-view").dataset.renders`) + 1
			run(t, ctx, s.what, click(s.button), waitFor(fmt.Sprintf(`#graph-view[data-renders="%d"] g.node[data-name="main"][data-state=%q]`, next, s.state)))
		}
		if got := shown(); !slices.Equal(got, s.want) {
			t.Errorf("%s (%s): functions %v, want %v", s.what, s.state, got, s.want)
		}
		if label := eval[map[string]graphNode](t, ctx, graphNodesJS)["main"].Label; !strings.HasPrefix(label, s.mark+" main") {
			t.Errorf("%s: main's label %q, want the %s mark", s.what, label, s.mark)
		}
		screenshot(t, ctx, fmt.Sprintf("graph-states-%d-%s", i, s.state))
	}
	// A double click steps up and wraps from all to collapsed.
	run(t, ctx, "double click", chromedp.DoubleClick(chromedp.CSS(`#graph-view g.node[data-name="main"]`)),
		waitFor(`#graph-view g.node[data-name="main"][data-state="collapsed"]`))
	if got := shown(); !slices.Equal(got, []string{"main"}) {
		t.Errorf("double click on all: functions %v, want main alone", got)
	}
	// Leaves have no mark.
	run(t, ctx, "expand", click("#graph-expand"), waitFor(`#graph-view g.node[data-name="main"][data-state="filtered"]`))
	if label := eval[map[string]graphNode](t, ctx, graphNodesJS)["io"].Label; !strings.HasPrefix(label, "io") {
		t.Errorf("leaf io's label %q, want no mark", label)
	}
}

// treeProfile is a sampling profile of n functions in a random call
// tree under main (each function called from one place, so a function
// shows exactly when its total passes the filter), whose self samples
// fall off roughly as 1/rank with noise. It returns the functions'
// totals and the root's.
func treeProfile(n int, seed uint64) (*model.Profile, map[string]int, int) {
	r := rand.New(rand.NewPCG(seed, 1))
	b := modeltest.New().Thread(1, 1, "tree")
	stacks := []string{"main"}
	parents := []int{-1}
	self := []int{1 + r.IntN(5)}
	for i := 1; i < n; i++ {
		p := r.IntN(i)
		stacks = append(stacks, fmt.Sprintf("%s;f%d", stacks[p], i))
		parents = append(parents, p)
		self = append(self, 1+r.IntN(3)+int(2000/math.Pow(float64(i), 1.1)*(0.5+r.Float64())))
	}
	totals := map[string]int{}
	total := 0
	for i := n - 1; i >= 0; i-- {
		b.Add(1, 1, stacks[i], self[i])
		total += self[i]
	}
	cum := slices.Clone(self)
	for i := n - 1; i > 0; i-- {
		cum[parents[i]] += cum[i]
	}
	for i, s := range stacks {
		totals[s[strings.LastIndex(s, ";")+1:]] = cum[i]
	}
	return b.Profile(), totals, total
}

// TestBrowserGraphInitialFilter loads call trees of 10, 100 and 10,000
// functions: the initial time filter (0 to 20%) shows every function
// when there are at most 30, else about 30. The rule
// takes the 30th largest total rounded up to the next 0.1%: at most 30
// functions pass (no two totals tie here), and in these profiles at
// least 25.
func TestBrowserGraphInitialFilter(t *testing.T) {
	ctx := browser(t)
	for _, n := range []int{10, 100, 10_000} {
		p, totals, total := treeProfile(n, uint64(n))
		srv := httptest.NewServer(NewHandler(p, fmt.Sprint(n, " functions")))
		run(t, ctx, fmt.Sprint(n, " functions: loading"), chromedp.Navigate(srv.URL+"/"), waitFor(`body[data-ready="1"]`), rendered("root", "-1"))
		nodes := eval[map[string]graphNode](t, ctx, graphNodesJS)
		filter := eval[[]string](t, ctx, `[document.getElementById("graph-view").dataset.filter, document.getElementById("graph-filter").value, document.getElementById("graph-filter-num").value]`)
		var pct float64
		if _, err := fmt.Sscan(filter[0], &pct); err != nil || filter[1] != filter[0] || filter[2] != filter[0] || pct < 0 || pct > 20 {
			t.Errorf("%d functions: filter %q (graph, slider, number), want one value in [0, 20]%%", n, filter)
		}
		// The functions shown are those whose total reaches the filter.
		for name, cum := range totals {
			_, shown := nodes[name]
			if reaches := 100*float64(cum) >= pct*float64(total)*(1-1e-9); reaches != shown {
				t.Errorf("%d functions: %s (%.3f%%) shown %v at filter %v%%", n, name, 100*float64(cum)/float64(total), shown, pct)
			}
		}
		switch {
		case n <= 30 && (len(nodes) != n || pct != 0):
			t.Errorf("%d functions: %d shown at %v%%, want all at 0%%", n, len(nodes), pct)
		case n > 30 && (len(nodes) < 25 || len(nodes) > 30):
			t.Errorf("%d functions: %d shown at %v%%, want 25 to 30", n, len(nodes), pct)
		}
		t.Logf("%d functions: %d shown at an initial filter of %v%%", n, len(nodes), pct)
		screenshot(t, ctx, fmt.Sprintf("graph-initial-%d", n))
		srv.Close()
	}
}

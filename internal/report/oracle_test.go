package report

// The sampling views as they were computed from the grouped stacks,
// before they rendered calltree's trees: an oracle of a different
// construction (one walk of each sample's function stack, the outermost
// occurrence found by a seen map) that TestSamplingViewsFromTree holds
// the tree-based views to.

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// stackTree is the tree view as it was built before calltree: it merges each thread's function-level stacks from the outermost
// frame into a tree. d.Stacks is sorted by owner, so each thread's (or
// goroutine's) stacks are contiguous.
func stackTree(d *data, o Options) TreeReport {
	r := TreeReport{Header: d.header("tree"), Processes: []TreeProcess{}}
	w := d.weight()
	total := w(d.Total)
	depth := map[calltree.Func]int{} // occurrences of each function on the current path
	for i := 0; i < len(d.Stacks); {
		first := &d.Stacks[i]
		pid := first.PID
		if len(r.Processes) == 0 || r.Processes[len(r.Processes)-1].PID != pid {
			r.Processes = append(r.Processes, TreeProcess{PID: pid, Name: d.processName(pid), Threads: []TreeThread{}})
		}
		pr := &r.Processes[len(r.Processes)-1]
		th := TreeThread{TID: first.TID, Goroutine: first.Goroutine, Name: ownerName(first)}
		if first.Thread != nil {
			th.Start = first.Thread.Start
		}
		root := &oracleNode{TreeNode: TreeNode{Name: th.Name}}
		for ; i < len(d.Stacks) && sameOwner(&d.Stacks[i], first); i++ {
			s := &d.Stacks[i]
			n := root
			n.Cum.Add(s.Count)
			clear(depth)
			for _, f := range s.Funcs {
				n = n.child(f, depth[f])
				depth[f]++
				n.Cum.Add(s.Count)
			}
			n.Base.Add(s.Count)
		}
		th.Root = root.node()
		pr.Total.Add(th.Root.Cum)
		if th.Root.prune(total, o, w) {
			pr.Threads = append(pr.Threads, th)
		}
	}
	r.Processes = slices.DeleteFunc(r.Processes, func(p TreeProcess) bool {
		return hidden(w(p.Total), total, o)
	})
	r.finish(total, w)
	return r
}

// sameOwner reports whether two stacks are of the same thread
// incarnation or goroutine.
func sameOwner(s, t *calltree.Stack) bool {
	return s.PID == t.PID && s.TID == t.TID && s.Thread == t.Thread &&
		(s.Goroutine == nil) == (t.Goroutine == nil) && goid(s.Goroutine) == goid(t.Goroutine)
}

// child returns n's child for f, creating it with recursion level rl.
func (n *oracleNode) child(f calltree.Func, rl int) *oracleNode {
	if c, ok := n.byFunc[f]; ok {
		return c
	}
	if n.byFunc == nil {
		n.byFunc = map[calltree.Func]*oracleNode{}
	}
	c := &oracleNode{TreeNode: TreeNode{Name: f.Name, Module: f.Module, Level: n.Level + 1, Recursion: rl}}
	n.byFunc[f] = c
	n.kids = append(n.kids, c)
	return c
}

// oracleNode is a TreeNode while stackTree builds it.
type oracleNode struct {
	TreeNode
	kids   []*oracleNode
	byFunc map[calltree.Func]*oracleNode
}

// node returns the finished TreeNode of n.
func (n *oracleNode) node() TreeNode {
	t := n.TreeNode
	t.Children = []TreeNode{}
	for _, c := range n.kids {
		t.Children = append(t.Children, c.node())
	}
	return t
}

// stackFlat is the flat view as it was computed from stacks before calltree: it computes self and total per function, sorted by self, then
// total (both largest first), then name and module.
func stackFlat(d *data, o Options) FlatReport {
	w := d.weight()
	type acc struct{ self, total calltree.Count }
	funcs := map[calltree.Func]*acc{}
	get := func(f calltree.Func) *acc {
		a := funcs[f]
		if a == nil {
			a = &acc{}
			funcs[f] = a
		}
		return a
	}
	// seen[f] == i+1 when f was already counted for stack i: a recursive
	// function adds to its total once per sample.
	seen := map[calltree.Func]int{}
	for i := range d.Stacks {
		s := &d.Stacks[i]
		for _, f := range s.Funcs {
			if seen[f] == i+1 {
				continue
			}
			seen[f] = i + 1
			get(f).total.Add(s.Count)
		}
		get(s.Funcs[len(s.Funcs)-1]).self.Add(s.Count)
	}

	r := FlatReport{Header: d.header("flat"), Functions: []FlatFunction{}}
	for f, a := range funcs {
		if hidden(w(a.self), w(d.Total), o) {
			continue
		}
		r.add(f, a.self, a.total, d.Total, w)
	}
	r.sort(w)
	return r
}

// stackArcflow is the arcflow view as it was computed from stacks
// before calltree, with its accumulators.
type arcAcc struct {
	base, cum         calltree.Count
	parents, children map[calltree.Func]*ArcRow
}

func arcRow(m map[calltree.Func]*ArcRow, f calltree.Func) *ArcRow {
	r := m[f]
	if r == nil {
		r = &ArcRow{Name: f.Name, Module: f.Module}
		m[f] = r
	}
	return r
}

func stackArcflow(d *data, o Options) ArcflowReport {
	w := d.weight()
	accs := map[calltree.Func]*arcAcc{}
	get := func(f calltree.Func) *arcAcc {
		a := accs[f]
		if a == nil {
			a = &arcAcc{parents: map[calltree.Func]*ArcRow{}, children: map[calltree.Func]*ArcRow{}}
			accs[f] = a
		}
		return a
	}
	caller := func(funcs []calltree.Func, i int) calltree.Func {
		if i == 0 {
			return calltree.Root
		}
		return funcs[i-1]
	}
	seen := map[calltree.Func]int{} // as in buildFlat: stack i+1 counted f already
	for i := range d.Stacks {
		s := &d.Stacks[i]
		k := len(s.Funcs) - 1
		for j, f := range s.Funcs {
			if seen[f] == i+1 {
				continue // only the outermost occurrence
			}
			seen[f] = i + 1
			a := get(f)
			a.cum.Add(s.Count)
			arcRow(a.parents, caller(s.Funcs, j)).Cum.Add(s.Count)
			if s.Funcs[k] != f {
				c := arcRow(a.children, s.Funcs[j+1])
				c.Cum.Add(s.Count)
				if j+1 == k {
					c.Base.Add(s.Count)
				}
			}
		}
		leaf := get(s.Funcs[k])
		leaf.base.Add(s.Count)
		arcRow(leaf.parents, caller(s.Funcs, k)).Base.Add(s.Count)
	}

	r := ArcflowReport{Header: d.header("arcflow"), Functions: []ArcStanza{}}
	for f, a := range accs {
		if hidden(w(a.cum), w(d.Total), o) {
			continue
		}
		r.add(f, a.base, a.cum, w(d.Total), sortedArcRows(a.parents, w), sortedArcRows(a.children, w), w)
	}
	r.sort(w)
	return r
}

// TestSamplingViewsFromTree holds the tree, flat and arcflow views, which
// render calltree.Build's trees, to the stack-walking oracle: the same
// reports, field for field, on random profiles (recursion direct,
// indirect and through inlined frames, samples without a stack), on the
// golden fixture under each filter and --min, and on a Go program's
// samples by goroutine and by label.
func TestSamplingViewsFromTree(t *testing.T) {
	type input struct {
		name string
		p    *model.Profile
		o    Options
	}
	var inputs []input
	r := rand.New(rand.NewPCG(7, 12))
	for i := range 300 {
		inputs = append(inputs, input{name: "random " + strconv.Itoa(i), p: modeltest.RandomSamples(r)})
	}
	for _, o := range []Options{{}, {Min: 5}, {Filter: model.Filter{PID: 100, HasPID: true}},
		{Filter: model.Filter{TID: 101, HasTID: true}}, {Filter: model.Filter{Thread: "d*"}}, {Filter: model.Filter{PID: 9, HasPID: true}}} {
		inputs = append(inputs, input{name: fmt.Sprintf("fixture %+v", o), p: modeltest.Fixture(), o: o})
	}
	goSamples := func() *model.Profile {
		p := modeltest.GoFixture()
		p.Events, p.Probes = nil, nil
		p.Labels = []model.Labels{{Time: 1_000_000, PID: 5, GoID: 7, Pairs: []model.LabelPair{{Key: "job", Value: "x"}}}}
		return p
	}
	inputs = append(inputs,
		input{name: "goroutines", p: goSamples(), o: Options{By: "goroutine"}},
		input{name: "threads of goroutines", p: goSamples()},
		input{name: "label", p: goSamples(), o: Options{Filter: model.Filter{Labels: []string{"job=x"}}}},
		input{name: "label by goroutine", p: goSamples(), o: Options{By: "goroutine", Filter: model.Filter{Labels: []string{"job=x"}}}})
	for _, in := range inputs {
		d := prepare(source{p: in.p, m: modeltest.Matcher(t, in.o.Filter)}, in.o.By == "goroutine")
		for view, pair := range map[string][2]func() (any, error){
			"tree":    {func() (any, error) { return buildTree(d, in.o) }, func() (any, error) { return stackTree(d, in.o), nil }},
			"flat":    {func() (any, error) { return buildFlat(d, in.o) }, func() (any, error) { return stackFlat(d, in.o), nil }},
			"arcflow": {func() (any, error) { return buildArcflow(d, in.o) }, func() (any, error) { return stackArcflow(d, in.o), nil }},
		} {
			got, err := pair[0]()
			if err != nil {
				t.Fatalf("%s %s: %v", in.name, view, err)
			}
			want, _ := pair[1]()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s %s:\n got %+v\nwant %+v", in.name, view, got, want)
			}
		}
	}
}

// sortedArcRows returns the rows of m, sorted by weight (w).
func sortedArcRows(m map[calltree.Func]*ArcRow, w weight) []ArcRow {
	rows := make([]ArcRow, 0, len(m))
	for _, r := range m {
		rows = append(rows, *r)
	}
	slices.SortFunc(rows, func(a, b ArcRow) int {
		return cmpArcs(w, a.Base, a.Cum, b.Base, b.Cum, a.Name, b.Name, a.Module, b.Module)
	})
	return rows
}

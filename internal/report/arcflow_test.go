package report

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model/modeltest"
)

// TestArcflowInvariants checks arcflow's four invariants on every
// stanza of random profiles, and that arcflow agrees with flat and tree.
func TestArcflowInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := range 500 {
		p := modeltest.RandomSamples(r)
		d := prepare(source{p: p}, false)
		arc, err := buildArcflow(d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var bases calltree.Count
		for _, s := range arc.Functions {
			var pBase, pCum, cCum calltree.Count
			var pCalls uint64
			for _, row := range s.Parents {
				pBase.Add(row.Base)
				pCum.Add(row.Cum)
				if row.Calls != nil {
					pCalls += *row.Calls
				}
			}
			for _, row := range s.Children {
				cCum.Add(row.Cum)
			}
			var selfCalls uint64
			if s.Calls != nil {
				selfCalls = *s.Calls
			}
			where := fmt.Sprintf("profile %d, stanza %s%s", iter, s.Name, s.Module)
			if pCalls != selfCalls {
				t.Errorf("%s: parents' calls %d != self calls %d", where, pCalls, selfCalls)
			}
			if pBase != s.Base {
				t.Errorf("%s: parents' base %v != self base %v", where, pBase, s.Base)
			}
			if pCum != s.Cum {
				t.Errorf("%s: parents' cum %v != self cum %v", where, pCum, s.Cum)
			}
			if want := (calltree.Count{Samples: s.Cum.Samples - s.Base.Samples, Period: s.Cum.Period - s.Base.Period}); cCum != want {
				t.Errorf("%s: children's cum %v != self cum - base %v", where, cCum, want)
			}
			bases.Add(s.Base)
		}
		if bases != d.Total {
			t.Errorf("profile %d: self bases add up to %v, want the total %v", iter, bases, d.Total)
		}

		// Flat self and total are arcflow's self base and cum.
		flat, err := buildFlat(d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(flat.Functions) != len(arc.Functions) {
			t.Fatalf("profile %d: %d flat functions, %d stanzas", iter, len(flat.Functions), len(arc.Functions))
		}
		byFunc := map[calltree.Func]ArcStanza{}
		for _, s := range arc.Functions {
			byFunc[calltree.Func{Name: s.Name, Module: s.Module}] = s
		}
		for _, f := range flat.Functions {
			s := byFunc[calltree.Func{Name: f.Name, Module: f.Module}]
			if f.Self != s.Base || f.Total != s.Cum {
				t.Errorf("profile %d: %s: flat self %v total %v, arcflow base %v cum %v", iter, f.Name, f.Self, f.Total, s.Base, s.Cum)
			}
		}

		// Tree: bases add up to the total, a node's cum is its base plus
		// its children's cum, and recursion levels count ancestors.
		tree, err := buildTree(d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var treeBase calltree.Count
		var check func(n *TreeNode, path []calltree.Func)
		check = func(n *TreeNode, path []calltree.Func) {
			treeBase.Add(n.Base)
			sum := n.Base
			f := calltree.Func{Name: n.Name, Module: n.Module}
			rl := 0
			for _, a := range path {
				if a == f {
					rl++
				}
			}
			if n.Level > 0 && rl != n.Recursion {
				t.Errorf("profile %d: node %s level %d: recursion %d, want %d", iter, n.Name, n.Level, n.Recursion, rl)
			}
			for i := range n.Children {
				c := &n.Children[i]
				sum.Add(c.Cum)
				if c.Level != n.Level+1 {
					t.Errorf("profile %d: child level %d under level %d", iter, c.Level, n.Level)
				}
				check(c, append(path, f))
			}
			if sum != n.Cum {
				t.Errorf("profile %d: node %s: base+children %v != cum %v", iter, n.Name, sum, n.Cum)
			}
		}
		for _, pr := range tree.Processes {
			for i := range pr.Threads {
				check(&pr.Threads[i].Root, nil)
			}
		}
		if treeBase != d.Total {
			t.Errorf("profile %d: tree bases add up to %v, want %v", iter, treeBase, d.Total)
		}
	}
}

// TestArcflowRecursion spells out one stanza of a recursive profile.
func TestArcflowRecursion(t *testing.T) {
	p := modeltest.New().Thread(1, 1, "x").
		Add(1, 1, "main;f;f;g", 2). // f recurses, then calls g
		Add(1, 1, "main;f;f", 3).   // f recurses, f is the leaf
		Add(1, 1, "main;g;f", 1).   // f under g
		Profile()
	arc, err := buildArcflow(prepare(source{p: p}, false), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var f *ArcStanza
	for i := range arc.Functions {
		if arc.Functions[i].Name == "f" {
			f = &arc.Functions[i]
		}
	}
	if f == nil {
		t.Fatal("no stanza for f")
	}
	row := func(name string, base, cum uint64) string { return fmt.Sprintf("%s %d/%d", name, base, cum) }
	rows := func(rs []ArcRow) []string {
		var out []string
		for _, r := range rs {
			out = append(out, row(r.Name, r.Base.Samples, r.Cum.Samples))
		}
		return out
	}
	got := fmt.Sprintf("parents %v self %s children %v", rows(f.Parents), row(f.Name, f.Base.Samples, f.Cum.Samples), rows(f.Children))
	// main;f;f;g (2): outermost f's parent main cum 2; child f cum 2.
	// main;f;f (3): parent main cum 3; leaf f's parent f base 3; base 3.
	// main;g;f (1): parent g cum 1, base 1 (f is the leaf); base 1.
	want := "parents [main 0/5 g 1/1 f 3/0] self f 4/6 children [f 0/2]"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

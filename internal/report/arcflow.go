package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"trueprof/internal/calltree"
)

// Root is the pseudo function that stands for "no caller" in arcflow's
// parent rows: the outermost frame of a stack is called by Root.
var Root = calltree.Root

// ArcRow is a parent or child row of an arcflow stanza.
type ArcRow struct {
	Name   string  `json:"name"`
	Module string  `json:"module"`
	Calls  *uint64 `json:"calls"` // always null: sampling does not count calls
	Base   Metrics `json:"base"`
	Cum    Metrics `json:"cum"`
}

// ArcStanza is the caller/callee stanza of one function (an arc per caller and callee): its
// parents, itself, its children. For a sample whose function stack is
// f1..fk (outermost first) and a function F at outermost position i:
//
//   - self cum counts the sample once; self base counts it if fk == F;
//   - the parent f(i-1), or Root if i == 1, gets the sample in cum;
//   - if fk == F, the leaf's parent f(k-1), or Root, gets it in base;
//   - if fk != F, the child f(i+1) gets it in cum, and in base if it is fk.
//
// So the parents' base and cum add up to the self row's, and the
// children's cum to the self cum minus the self base, recursion included.
type ArcStanza struct {
	Name       string   `json:"name"`
	Module     string   `json:"module"`
	Calls      *uint64  `json:"calls"` // always null
	Base       Metrics  `json:"base"`
	Cum        Metrics  `json:"cum"`
	CumPercent float64  `json:"cum_percent"` // of the filtered total
	Parents    []ArcRow `json:"parents"`     // by cum, largest first, then base, name
	Children   []ArcRow `json:"children"`    // same order
}

// ArcflowReport is the JSON form of the arcflow view.
type ArcflowReport struct {
	Header
	Functions []ArcStanza `json:"functions"` // by cum, largest first, then base, name
}

type arcAcc struct {
	base, cum         Metrics
	parents, children map[Func]*ArcRow
}

func arcRow(m map[Func]*ArcRow, f Func) *ArcRow {
	r := m[f]
	if r == nil {
		r = &ArcRow{Name: f.Name, Module: f.Module}
		m[f] = r
	}
	return r
}

func buildArcflow(d *data, o Options) ArcflowReport {
	accs := map[Func]*arcAcc{}
	get := func(f Func) *arcAcc {
		a := accs[f]
		if a == nil {
			a = &arcAcc{parents: map[Func]*ArcRow{}, children: map[Func]*ArcRow{}}
			accs[f] = a
		}
		return a
	}
	caller := func(funcs []Func, i int) Func {
		if i == 0 {
			return Root
		}
		return funcs[i-1]
	}
	seen := map[Func]int{} // as in buildFlat: stack i+1 counted f already
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
		if hidden(a.cum.Samples, d.Total.Samples, o) {
			continue
		}
		r.Functions = append(r.Functions, ArcStanza{
			Name:       f.Name,
			Module:     f.Module,
			Base:       a.base,
			Cum:        a.cum,
			CumPercent: percent(a.cum.Samples, d.Total.Samples),
			Parents:    sortedArcRows(a.parents),
			Children:   sortedArcRows(a.children),
		})
	}
	slices.SortFunc(r.Functions, func(a, b ArcStanza) int {
		return cmp.Or(
			cmp.Compare(b.Cum.Samples, a.Cum.Samples),
			cmp.Compare(b.Base.Samples, a.Base.Samples),
			cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Module, b.Module))
	})
	return r
}

func sortedArcRows(m map[Func]*ArcRow) []ArcRow {
	rows := make([]ArcRow, 0, len(m))
	for _, r := range m {
		rows = append(rows, *r)
	}
	slices.SortFunc(rows, func(a, b ArcRow) int {
		return cmp.Or(
			cmp.Compare(b.Cum.Samples, a.Cum.Samples),
			cmp.Compare(b.Base.Samples, a.Base.Samples),
			cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Module, b.Module))
	})
	return rows
}

func arcflowText(w io.Writer, d *data, o Options) error {
	r := buildArcflow(d, o)
	fmt.Fprintln(w, "Each stanza: the function's parents (callers), the function itself")
	fmt.Fprintln(w, "(not indented, with its CUM%), then its children (callees).")
	sep := strings.Repeat("-", 60)
	row := func(base, cum Metrics, pct, name string) {
		fmt.Fprintf(w, "%6s %10d %10d %7s  %s\n", "-", base.Samples, cum.Samples, pct, name)
	}
	for _, s := range r.Functions {
		fmt.Fprintln(w, sep)
		fmt.Fprintf(w, "%6s %10s %10s %7s  %s\n", "CALLS", "BASE", "CUM", "CUM%", "NAME")
		for _, p := range s.Parents {
			row(p.Base, p.Cum, "", "    "+funcLabel(Func{Name: p.Name, Module: p.Module}))
		}
		row(s.Base, s.Cum, fmt.Sprintf("%.2f%%", s.CumPercent), funcLabel(Func{Name: s.Name, Module: s.Module}))
		for _, c := range s.Children {
			row(c.Base, c.Cum, "", "    "+funcLabel(Func{Name: c.Name, Module: c.Module}))
		}
	}
	if len(r.Functions) > 0 {
		fmt.Fprintln(w, sep)
	}
	return nil
}

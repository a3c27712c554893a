package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"trueprof/internal/calltree"
)

// ArcRow is a parent or child row of an arcflow stanza.
type ArcRow struct {
	Name   string         `json:"name"`
	Module string         `json:"module"`
	Calls  *uint64        `json:"calls"` // always null: sampling does not count calls
	Base   calltree.Count `json:"base"`
	Cum    calltree.Count `json:"cum"`
}

// ArcStanza is the caller/callee stanza of one function (an arc per caller and callee): its
// parents, itself, its children. For a sample whose function stack is
// f1..fk (outermost first) and a function F at outermost position i:
//
//   - self cum counts the sample once; self base counts it if fk == F;
//   - the parent f(i-1), or calltree.Root if i == 1, gets the sample in cum;
//   - if fk == F, the leaf's parent f(k-1), or calltree.Root, gets it in base;
//   - if fk != F, the child f(i+1) gets it in cum, and in base if it is fk.
//
// So the parents' base and cum add up to the self row's, and the
// children's cum to the self cum minus the self base, recursion included.
type ArcStanza struct {
	Name       string         `json:"name"`
	Module     string         `json:"module"`
	Calls      *uint64        `json:"calls"` // always null
	Base       calltree.Count `json:"base"`
	Cum        calltree.Count `json:"cum"`
	CumPercent float64        `json:"cum_percent"` // of the filtered total
	Parents    []ArcRow       `json:"parents"`     // by cum, largest first, then base, name
	Children   []ArcRow       `json:"children"`    // same order
}

// ArcflowReport is the JSON form of the arcflow view.
type ArcflowReport struct {
	Header
	Functions []ArcStanza `json:"functions"` // by cum, largest first, then base, name
}

// buildArcflow makes a stanza of each of calltree's functions (data.result):
// its callers and callees are its arcs (Callers and Callees), with
// the samples of its outermost activations.
func buildArcflow(d *data, o Options) (ArcflowReport, error) {
	res, err := d.result()
	if err != nil {
		return ArcflowReport{}, err
	}
	r := ArcflowReport{Header: d.header("arcflow"), Functions: []ArcStanza{}}
	w := d.weight()
	for i := range res.Functions {
		f := &res.Functions[i]
		if hidden(w(count(f.Total)), w(d.Total), o) {
			continue
		}
		fn := calltree.Func{Name: f.Name, Module: f.Module}
		r.add(fn, count(f.Self), count(f.Total), w(d.Total), arcRows(f.Callers, w), arcRows(f.Callees, w), w)
	}
	r.sort(w)
	return r, nil
}

// add adds the stanza of function f with its base and cum, cum's share
// being of all (weights: w).
func (r *ArcflowReport) add(f calltree.Func, base, cum calltree.Count, all uint64, parents, children []ArcRow, w weight) {
	r.Functions = append(r.Functions, ArcStanza{Name: f.Name, Module: f.Module, Base: base, Cum: cum,
		CumPercent: percent(w(cum), all), Parents: parents, Children: children})
}

// sort orders the stanzas by the weight w of cum, largest first, then of
// base, then name and module.
func (r *ArcflowReport) sort(w weight) {
	slices.SortFunc(r.Functions, func(a, b ArcStanza) int {
		return cmpArcs(w, a.Base, a.Cum, b.Base, b.Cum, a.Name, b.Name, a.Module, b.Module)
	})
}

// cmpArcs orders arcflow's rows by the weight w of cum, largest first,
// then of base, then name and module.
func cmpArcs(w weight, aBase, aCum, bBase, bCum calltree.Count, aName, bName, aMod, bMod string) int {
	return cmp.Or(
		cmp.Compare(w(bCum), w(aCum)),
		cmp.Compare(w(bBase), w(aBase)),
		cmp.Compare(aName, bName),
		cmp.Compare(aMod, bMod))
}

// arcRows are the caller rows of arcs with samples, sorted (cmpArcs).
// An arc without samples is a recursive activation's, which arcflow
// does not count.
func arcRows(arcs []calltree.Arc, w weight) []ArcRow {
	rows := make([]ArcRow, 0, len(arcs))
	for _, a := range arcs {
		if a.Cum.Samples > 0 || a.Base.Samples > 0 {
			rows = append(rows, ArcRow{Name: a.Name, Module: a.Module, Base: count(a.Base), Cum: count(a.Cum)})
		}
	}
	slices.SortFunc(rows, func(a, b ArcRow) int {
		return cmpArcs(w, a.Base, a.Cum, b.Base, b.Cum, a.Name, b.Name, a.Module, b.Module)
	})
	return rows
}

func arcflowText(w io.Writer, d *data, o Options) error {
	r, err := buildArcflow(d, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "Each stanza: the function's parents (callers), the function itself")
	fmt.Fprintln(w, "(not indented, with its CUM%), then its children (callees).")
	sep := strings.Repeat("-", 60)
	row := func(base, cum calltree.Count, pct, name string) {
		fmt.Fprintf(w, "%6s %10d %10d %7s  %s\n", "-", base.Samples, cum.Samples, pct, name)
	}
	for _, s := range r.Functions {
		fmt.Fprintln(w, sep)
		fmt.Fprintf(w, "%6s %10s %10s %7s  %s\n", "CALLS", "BASE", "CUM", "CUM%", "NAME")
		for _, p := range s.Parents {
			row(p.Base, p.Cum, "", "    "+funcLabel(calltree.Func{Name: p.Name, Module: p.Module}))
		}
		row(s.Base, s.Cum, fmt.Sprintf("%.2f%%", s.CumPercent), funcLabel(calltree.Func{Name: s.Name, Module: s.Module}))
		for _, c := range s.Children {
			row(c.Base, c.Cum, "", "    "+funcLabel(calltree.Func{Name: c.Name, Module: c.Module}))
		}
	}
	if len(r.Functions) > 0 {
		fmt.Fprintln(w, sep)
	}
	return nil
}

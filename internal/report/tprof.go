package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"trueprof/internal/calltree"
)

// TprofRow is one row of the tprof report: a process, thread, module or
// symbol with its ticks (samples) and their share (of their weight:
// data.weight). Children are one level down.
type TprofRow struct {
	Label    string     `json:"label"`        // "PID", "TID", "MOD" or "SYM"
	ID       *uint32    `json:"id,omitempty"` // pid or tid for PID and TID rows
	Name     string     `json:"name"`
	Ticks    uint64     `json:"ticks"`
	Percent  float64    `json:"percent"` // of the filtered total
	Children []TprofRow `json:"children,omitempty"`
}

// TprofReport is the JSON form of the tprof view.
type TprofReport struct {
	Header
	Processes []TprofRow `json:"processes"`
}

// tprofNode accumulates ticks while the hierarchy is built.
type tprofNode struct {
	name     string
	id       *uint32
	start    uint64 // a thread incarnation's creation, which tells two apart
	count    calltree.Count
	children map[string]*tprofNode
}

// child returns n's child of key, named name.
func (n *tprofNode) child(key, name string) *tprofNode {
	c := n.children[key]
	if c == nil {
		c = &tprofNode{name: name, children: map[string]*tprofNode{}}
		n.children[key] = c
	}
	return c
}

// buildTprof builds the process → thread → module → symbol hierarchy of
// the classic tprof report. The symbol is the physical function, as in perf
// report, not the inlined frame. A reused tid is another thread.
func buildTprof(d *data, o Options) TprofReport {
	root := &tprofNode{children: map[string]*tprofNode{}}
	for i := range d.Stacks {
		s := &d.Stacks[i]
		name := d.processName(s.PID)
		pr := root.child(name, name)
		pr.id = &s.PID
		var start uint64
		if s.Thread != nil {
			start = s.Thread.Start
		}
		name = ownerName(s)
		th := pr.child(fmt.Sprintf("%s@%d", name, start), name)
		th.id, th.start = &s.TID, start
		mod := th.child(moduleName(s.Symbol.Module), moduleName(s.Symbol.Module))
		sym := mod.child(s.Symbol.Name, s.Symbol.Name)
		for _, n := range []*tprofNode{pr, th, mod, sym} {
			n.count.Add(s.Count)
		}
	}
	w := d.weight()
	return TprofReport{
		Header:    d.header("tprof"),
		Processes: tprofRows(root, []string{"PID", "TID", "MOD", "SYM"}, w(d.Total), o, w),
	}
}

// tprofRows returns n's children as rows labelled labels[0], sorted by
// weight (w), largest first, then by name (and creation), with their
// percentages of total.
func tprofRows(n *tprofNode, labels []string, total uint64, o Options, w weight) []TprofRow {
	if len(labels) == 0 {
		return nil
	}
	kids := make([]*tprofNode, 0, len(n.children))
	for _, c := range n.children {
		if !hidden(w(c.count), total, o) {
			kids = append(kids, c)
		}
	}
	slices.SortFunc(kids, func(a, b *tprofNode) int {
		return cmp.Or(cmp.Compare(w(b.count), w(a.count)), cmp.Compare(a.name, b.name), cmp.Compare(a.start, b.start))
	})
	rows := []TprofRow{}
	for _, c := range kids {
		rows = append(rows, TprofRow{
			Label:    labels[0],
			ID:       c.id,
			Name:     c.name,
			Ticks:    c.count.Samples,
			Percent:  percent(w(c.count), total),
			Children: tprofRows(c, labels[1:], total, o, w),
		})
	}
	return rows
}

func tprofText(w io.Writer, d *data, o Options) error {
	r := buildTprof(d, o)
	fmt.Fprintln(w, "Process_Thread Module_Symbol")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-3s %10s %7s  %s\n", "LAB", "TKS", "%%", "NAMES")
	var print func(rows []TprofRow)
	print = func(rows []TprofRow) {
		for _, r := range rows {
			fmt.Fprintf(w, "%-3s %10d %7.2f  %s\n", r.Label, r.Ticks, r.Percent, r.Name)
			print(r.Children)
		}
	}
	print(r.Processes)
	return nil
}

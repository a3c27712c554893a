package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
)

// TprofRow is one row of the tprof report: a process, thread, module or
// symbol with its ticks (samples). Children are one level down.
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
	id       *uint32
	ticks    uint64
	children map[string]*tprofNode
}

func (n *tprofNode) child(name string) *tprofNode {
	c := n.children[name]
	if c == nil {
		c = &tprofNode{children: map[string]*tprofNode{}}
		n.children[name] = c
	}
	return c
}

// buildTprof builds the process → thread → module → symbol hierarchy of
// seed 004's figure 4. The symbol is the physical function, as in perf
// report, not the inlined frame.
func buildTprof(d *data, o Options) TprofReport {
	root := &tprofNode{children: map[string]*tprofNode{}}
	for i := range d.stacks {
		s := &d.stacks[i]
		pr := root.child(d.processName(s.PID))
		pr.id = &s.PID
		th := pr.child(d.threadName(s.PID, s.TID))
		th.id = &s.TID
		mod := th.child(moduleName(s.Symbol.Module))
		sym := mod.child(s.Symbol.Name)
		for _, n := range []*tprofNode{pr, th, mod, sym} {
			n.ticks += s.Samples
		}
	}
	return TprofReport{
		Header:    d.header("tprof"),
		Processes: tprofRows(root, []string{"PID", "TID", "MOD", "SYM"}, d.total.Samples, o),
	}
}

// tprofRows returns n's children as rows labelled labels[0], sorted by
// ticks, largest first, then by name.
func tprofRows(n *tprofNode, labels []string, total uint64, o Options) []TprofRow {
	if len(labels) == 0 {
		return nil
	}
	rows := []TprofRow{}
	for name, c := range n.children {
		if hidden(c.ticks, total, o) {
			continue
		}
		rows = append(rows, TprofRow{
			Label:    labels[0],
			ID:       c.id,
			Name:     name,
			Ticks:    c.ticks,
			Percent:  percent(c.ticks, total),
			Children: tprofRows(c, labels[1:], total, o),
		})
	}
	slices.SortFunc(rows, func(a, b TprofRow) int {
		return cmp.Or(cmp.Compare(b.Ticks, a.Ticks), cmp.Compare(a.Name, b.Name))
	})
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

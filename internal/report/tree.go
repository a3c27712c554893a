package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"trueprof/internal/calltree"
)

// TreeNode is a node of a call-stack tree: one distinct call
// stack prefix of a thread.
type TreeNode struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	Level  int    `json:"level"` // depth from the thread's root, which is 0
	// Recursion is how many times this node's function occurs among its
	// ancestors.
	Recursion int     `json:"recursion"`
	Calls     *uint64 `json:"calls"` // always null: sampling does not count calls
	// Base counts the samples whose stack ends exactly here; Cum adds the
	// samples of all descendants.
	Base       calltree.Count `json:"base"`
	Cum        calltree.Count `json:"cum"`
	CumPercent float64        `json:"cum_percent"` // of the filtered total
	Children   []TreeNode     `json:"children"`    // by cum, largest first, then name; never null
}

// TreeThread is the call-stack tree of one thread incarnation (a reused
// tid is another thread) or, by goroutine, of one goroutine. Its root is
// the thread itself (named "name_tid" like tprof), or "goroutine N", at
// level 0.
type TreeThread struct {
	TID   uint32 `json:"tid"`                // 0 for a goroutine
	Start uint64 `json:"start_ns,omitempty"` // the incarnation's creation; absent if before recording
	// Goroutine is the goroutine's id; absent for a thread.
	Goroutine *uint64  `json:"goroutine,omitempty"`
	Name      string   `json:"name"`
	Root      TreeNode `json:"root"`
}

// TreeProcess groups the trees of a process's threads.
type TreeProcess struct {
	PID     uint32         `json:"pid"`
	Name    string         `json:"name"`
	Total   calltree.Count `json:"total"`   // the process's samples
	Percent float64        `json:"percent"` // of the filtered total
	Threads []TreeThread   `json:"threads"` // by cum, largest first, then goroutine, tid and start
}

// TreeReport is the JSON form of the tree view.
type TreeReport struct {
	Header
	Processes []TreeProcess `json:"processes"` // by samples, largest first, then pid
}

// buildTree renders the trees of calltree.Build (data.result), where a
// sample became a node, keeping the threads and goroutines with samples.
func buildTree(d *data, o Options) (TreeReport, error) {
	res, err := d.result()
	if err != nil {
		return TreeReport{}, err
	}
	r := TreeReport{Header: d.header("tree"), Processes: []TreeProcess{}}
	w := d.weight()
	total := w(d.Total)
	for _, p := range res.Processes {
		pr := TreeProcess{PID: p.PID, Name: d.processName(p.PID), Threads: []TreeThread{}}
		sampled := false
		for i := range p.Threads {
			t := &p.Threads[i]
			if t.Root.Cum.Samples == 0 {
				continue
			}
			sampled = true
			th := TreeThread{TID: t.TID, Start: t.Start, Goroutine: t.Goroutine, Name: t.Root.Name, Root: treeNode(&t.Root)}
			pr.Total.Add(th.Root.Cum)
			if th.Root.prune(total, o, w) {
				pr.Threads = append(pr.Threads, th)
			}
		}
		if sampled && !hidden(w(pr.Total), total, o) {
			r.Processes = append(r.Processes, pr)
		}
	}
	r.finish(total, w)
	return r, nil
}

// finish fills in the processes' percentages of total and sorts them
// by weight (w), largest first, then pid, and their threads by weight,
// then goroutine, tid and start.
func (r *TreeReport) finish(total uint64, w weight) {
	for i := range r.Processes {
		pr := &r.Processes[i]
		pr.Percent = percent(w(pr.Total), total)
		slices.SortFunc(pr.Threads, func(a, b TreeThread) int {
			return cmp.Or(cmp.Compare(w(b.Root.Cum), w(a.Root.Cum)), cmp.Compare(goid(a.Goroutine), goid(b.Goroutine)),
				cmp.Compare(a.TID, b.TID), cmp.Compare(a.Start, b.Start))
		})
	}
	slices.SortFunc(r.Processes, func(a, b TreeProcess) int {
		return cmp.Or(cmp.Compare(w(b.Total), w(a.Total)), cmp.Compare(a.PID, b.PID))
	})
}

// treeNode converts n and its descendants with samples: a sampling
// node counts samples and their period, never calls or time.
func treeNode(n *calltree.Node) TreeNode {
	t := TreeNode{Name: n.Name, Module: n.Module, Level: n.Level, Recursion: n.Recursion,
		Base: count(n.Base), Cum: count(n.Cum), Children: make([]TreeNode, 0, len(n.Children))}
	for i := range n.Children {
		if n.Children[i].Cum.Samples > 0 {
			t.Children = append(t.Children, treeNode(&n.Children[i]))
		}
	}
	return t
}

// count is the part of m the sampling views show.
func count(m calltree.Metrics) calltree.Count {
	return calltree.Count{Samples: m.Samples, Period: m.Period}
}

// goid is a goroutine's id, 0 for none, for comparisons.
func goid(g *uint64) uint64 {
	if g == nil {
		return 0
	}
	return *g
}

// prune drops the descendants of n below o.Min, sorts the rest by
// weight (w), fills in the percentages of total and reports whether n
// itself is kept.
func (n *TreeNode) prune(total uint64, o Options, w weight) bool {
	if hidden(w(n.Cum), total, o) {
		return false
	}
	n.CumPercent = percent(w(n.Cum), total)
	kept := n.Children[:0]
	for i := range n.Children {
		// Prune in place before copying: the copy must carry the result.
		if n.Children[i].prune(total, o, w) {
			kept = append(kept, n.Children[i])
		}
	}
	n.Children = kept
	slices.SortFunc(n.Children, func(a, b TreeNode) int {
		return cmp.Or(cmp.Compare(w(b.Cum), w(a.Cum)), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Module, b.Module))
	})
	return true
}

func treeText(w io.Writer, d *data, o Options) error {
	r, err := buildTree(d, o)
	if err != nil {
		return err
	}
	for _, pr := range r.Processes {
		fmt.Fprintf(w, "Process %s: %d samples (%.2f%%)\n", pr.Name, pr.Total.Samples, pr.Percent)
		for _, th := range pr.Threads {
			fmt.Fprintf(w, "\n%4s %4s %6s %10s %10s %7s  %s\n", "LV", "RL", "CALLS", "BASE", "CUM", "CUM%", "NAME")
			var print func(n *TreeNode)
			print = func(n *TreeNode) {
				fmt.Fprintf(w, "%4d %4d %6s %10d %10d %6.2f%%  %s%s\n",
					n.Level, n.Recursion, "-", n.Base.Samples, n.Cum.Samples, n.CumPercent,
					strings.Repeat("  ", n.Level), funcLabel(calltree.Func{Name: n.Name, Module: n.Module}))
				for i := range n.Children {
					print(&n.Children[i])
				}
			}
			print(&th.Root)
		}
		fmt.Fprintln(w)
	}
	return nil
}

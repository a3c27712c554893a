package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
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
	Base        Metrics    `json:"base"`
	Cum         Metrics    `json:"cum"`
	CumPercent  float64    `json:"cum_percent"` // of the filtered total
	Children    []TreeNode `json:"children"`    // by cum, largest first, then name; never null
	childByFunc map[Func]int
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
	PID     uint32       `json:"pid"`
	Name    string       `json:"name"`
	Total   Metrics      `json:"total"`   // the process's samples
	Percent float64      `json:"percent"` // of the filtered total
	Threads []TreeThread `json:"threads"` // by cum, largest first, then goroutine, tid and start
}

// TreeReport is the JSON form of the tree view.
type TreeReport struct {
	Header
	Processes []TreeProcess `json:"processes"` // by samples, largest first, then pid
}

// buildTree merges each thread's function-level stacks from the outermost
// frame into a tree. d.Stacks is sorted by owner, so each thread's (or
// goroutine's) stacks are contiguous.
func buildTree(d *data, o Options) TreeReport {
	r := TreeReport{Header: d.header("tree"), Processes: []TreeProcess{}}
	total := d.Total.Samples
	depth := map[Func]int{} // occurrences of each function on the current path
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
		th.Root = TreeNode{Name: th.Name, Children: []TreeNode{}}
		for ; i < len(d.Stacks) && sameOwner(&d.Stacks[i], first); i++ {
			s := &d.Stacks[i]
			n := &th.Root
			n.Cum.Add(s.Count)
			clear(depth)
			for _, f := range s.Funcs {
				n = n.child(f, depth[f])
				depth[f]++
				n.Cum.Add(s.Count)
			}
			n.Base.Add(s.Count)
		}
		pr.Total.Add(th.Root.Cum)
		if th.Root.prune(total, o) {
			pr.Threads = append(pr.Threads, th)
		}
	}
	r.Processes = slices.DeleteFunc(r.Processes, func(p TreeProcess) bool {
		return hidden(p.Total.Samples, total, o)
	})
	for i := range r.Processes {
		pr := &r.Processes[i]
		pr.Percent = percent(pr.Total.Samples, total)
		slices.SortFunc(pr.Threads, func(a, b TreeThread) int {
			return cmp.Or(cmp.Compare(b.Root.Cum.Samples, a.Root.Cum.Samples), cmp.Compare(goid(a.Goroutine), goid(b.Goroutine)),
				cmp.Compare(a.TID, b.TID), cmp.Compare(a.Start, b.Start))
		})
	}
	slices.SortFunc(r.Processes, func(a, b TreeProcess) int {
		return cmp.Or(cmp.Compare(b.Total.Samples, a.Total.Samples), cmp.Compare(a.PID, b.PID))
	})
	return r
}

// sameOwner reports whether two stacks are of the same thread
// incarnation or goroutine.
func sameOwner(s, t *Stack) bool {
	return s.PID == t.PID && s.TID == t.TID && s.Thread == t.Thread &&
		(s.Goroutine == nil) == (t.Goroutine == nil) && goid(s.Goroutine) == goid(t.Goroutine)
}

// goid is a goroutine's id, 0 for none, for comparisons.
func goid(g *uint64) uint64 {
	if g == nil {
		return 0
	}
	return *g
}

// child returns n's child for f, creating it with recursion level rl.
func (n *TreeNode) child(f Func, rl int) *TreeNode {
	if j, ok := n.childByFunc[f]; ok {
		return &n.Children[j]
	}
	if n.childByFunc == nil {
		n.childByFunc = map[Func]int{}
	}
	n.childByFunc[f] = len(n.Children)
	n.Children = append(n.Children, TreeNode{
		Name:      f.Name,
		Module:    f.Module,
		Level:     n.Level + 1,
		Recursion: rl,
		Children:  []TreeNode{},
	})
	return &n.Children[len(n.Children)-1]
}

// prune drops the descendants of n below o.Min, sorts the rest, fills in
// the percentages and reports whether n itself is kept. It runs once the
// tree is complete, since child pointers are only stable until then.
func (n *TreeNode) prune(total uint64, o Options) bool {
	n.childByFunc = nil
	if hidden(n.Cum.Samples, total, o) {
		return false
	}
	n.CumPercent = percent(n.Cum.Samples, total)
	kept := n.Children[:0]
	for i := range n.Children {
		// Prune in place before copying: the copy must carry the result.
		if n.Children[i].prune(total, o) {
			kept = append(kept, n.Children[i])
		}
	}
	n.Children = kept
	slices.SortFunc(n.Children, func(a, b TreeNode) int {
		return cmp.Or(cmp.Compare(b.Cum.Samples, a.Cum.Samples), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Module, b.Module))
	})
	return true
}

func treeText(w io.Writer, d *data, o Options) error {
	r := buildTree(d, o)
	for _, pr := range r.Processes {
		fmt.Fprintf(w, "Process %s: %d samples (%.2f%%)\n", pr.Name, pr.Total.Samples, pr.Percent)
		for _, th := range pr.Threads {
			fmt.Fprintf(w, "\n%4s %4s %6s %10s %10s %7s  %s\n", "LV", "RL", "CALLS", "BASE", "CUM", "CUM%", "NAME")
			var print func(n *TreeNode)
			print = func(n *TreeNode) {
				fmt.Fprintf(w, "%4d %4d %6s %10d %10d %6.2f%%  %s%s\n",
					n.Level, n.Recursion, "-", n.Base.Samples, n.Cum.Samples, n.CumPercent,
					strings.Repeat("  ", n.Level), funcLabel(Func{Name: n.Name, Module: n.Module}))
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

package calltree

import (
	"cmp"
	"slices"
	"unsafe"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// nodeBytes is what one node of a Live tree costs: the replay's node,
// the totals last written, its parent and trace id, and its entry in the
// thread's child map (a key, a value and about as much again of the
// map's own structure).
const nodeBytes = int64(unsafe.Sizeof(node{})+unsafe.Sizeof(nodeTotals{})) + 4 + 4 + 2*(8+4)

// Bound caps the memory of l's trees at about bytes (0: no bound): past
// it, Prune folds the smallest subtrees into "(pruned)" nodes.
func (l *Live) Bound(bytes int64) { l.maxBytes = bytes }

// Over reports whether the trees have outgrown the bound.
func (l *Live) Over() bool {
	return l.maxBytes > 0 && int64(l.Nodes())*nodeBytes > l.maxBytes
}

// Prune bounds the trees' memory, when they have outgrown it (dynamic
// pruning): it writes a snapshot at time now (so that
// the reader knows every node as the recorder does), then folds the
// subtrees of smallest cum wall time, with everything they measured,
// into one "(pruned)" child of their parent, until the trees are down
// to three quarters of the bound; every total of every node kept stays
// exact, and the calls open on the shadow stacks and their callers are
// never folded. Each folded node is written as a pruned TreeNode, and
// the memory is given back.
func (l *Live) Prune(now uint64, w TreeWriter) error {
	if !l.Over() {
		return nil
	}
	if err := l.Snapshot(now, w); err != nil {
		return err
	}
	excess := l.Nodes() - int(l.maxBytes*3/4/nodeBytes)
	if l.pruned < 0 {
		l.pruned = FuncID(len(l.a.t.funcs))
		l.a.t.funcs = append(l.a.t.funcs, prunedFunc)
		l.where = append(l.where, treeFunc{frame: model.PrunedFrame})
	}
	// Candidates from every thread, smallest subtree first.
	type cand struct {
		th  *thread
		n   int32
		cum float64
	}
	var cands []cand
	for _, th := range l.threads() {
		lt := l.trees[th]
		cum := make([]float64, len(th.nodes))
		for i := len(th.nodes) - 1; i > 0; i-- { // a child comes after its parent
			cum[i] += th.nodes[i].base.WallNS
			cum[lt.parent[i]] += cum[i]
		}
		pinned := make([]bool, len(th.nodes))
		for _, fr := range th.stack {
			for n := fr.node; n > 0 && !pinned[n]; n = lt.parent[n] {
				pinned[n] = true
			}
		}
		for i := 1; i < len(th.nodes); i++ {
			if !pinned[i] && th.nodes[i].fn != l.pruned {
				cands = append(cands, cand{th, int32(i), cum[i]})
			}
		}
	}
	slices.SortFunc(cands, func(x, y cand) int { return cmp.Compare(x.cum, y.cum) })
	gone := map[*thread]*[]bool{}
	for _, c := range cands {
		if excess <= 0 {
			break
		}
		g := gone[c.th]
		if g == nil {
			g = new([]bool)
			gone[c.th] = g
		}
		if int(c.n) < len(*g) && (*g)[c.n] {
			continue // inside a subtree folded already
		}
		n, err := l.fold(c.th, c.n, g, now, w)
		if err != nil {
			return err
		}
		excess -= n
		l.prunedNS += c.cum
	}
	for th, g := range gone {
		l.compact(th, *g)
	}
	return nil
}

// fold folds the subtree of node n of th into the "(pruned)" child of
// n's parent, marking its nodes in gone, and returns how many nodes
// fewer th has: those folded, less the (pruned) node if it is new.
func (l *Live) fold(th *thread, n int32, gone *[]bool, now uint64, w TreeWriter) (int, error) {
	lt := l.trees[th]
	parent := lt.parent[n]
	q := th.child(parent, l.pruned, 0)
	folded := 0
	if int(q) == len(lt.parent) { // a new node: the reader learns it
		folded--
		lt.parent = append(lt.parent, parent)
		lt.id = append(lt.id, lt.next)
		lt.next++
		lt.prev = append(lt.prev, nodeTotals{})
		if err := w.Write(&trace.TreeNode{Time: now, Thread: lt.slot, ID: lt.id[q], Parent: lt.id[parent],
			Frame: model.PrunedFrame}); err != nil {
			return 0, err
		}
	}
	// The subtree, depth first from n.
	for len(*gone) < len(th.nodes) {
		*gone = append(*gone, false)
	}
	todo := []int32{n}
	for len(todo) > 0 {
		i := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		for c := th.nodes[i].firstChild; c >= 0; c = th.nodes[c].next {
			if int(c) >= len(*gone) || !(*gone)[c] { // not folded already (into a (pruned) child here)
				todo = append(todo, c)
			}
		}
		// The (pruned) node measures everything folded; its calls are
		// those of the subtrees' roots, so that its parent's callees
		// still add up, and it has no time per call.
		m, qn, p := &th.nodes[i], &th.nodes[q], &lt.prev[q]
		if i == n {
			qn.calls += m.calls
			p.calls += m.calls // the snapshot just written: the reader has m
		}
		qn.base.Add(m.base)
		p.base.Add(m.base)
		if err := w.Write(&trace.TreeNode{Time: now, Thread: lt.slot, ID: lt.id[i], Parent: lt.id[q], Pruned: true}); err != nil {
			return 0, err
		}
		(*gone)[i] = true
		folded++
		l.prunedNodes++
	}
	return folded, nil
}

// compact drops the nodes of th marked in gone (nodes past its end are
// kept), renumbering the rest in
// order and rebuilding the child lists and map, so that their memory is
// given back.
func (l *Live) compact(th *thread, gone []bool) {
	lt := l.trees[th]
	idx := make([]int32, len(th.nodes))
	nodes := make([]node, 0, len(th.nodes))
	keep := func(i int) bool { return i >= len(gone) || !gone[i] }
	for i := range th.nodes {
		idx[i] = -1
		if keep(i) {
			idx[i] = int32(len(nodes))
			nodes = append(nodes, th.nodes[i])
		}
	}
	prev := make([]nodeTotals, 0, len(nodes))
	parent := make([]int32, 0, len(nodes))
	ids := make([]uint32, 0, len(nodes))
	kids := make(map[uint64]int32, len(nodes))
	for i := range nodes {
		// lastKid held an index of the old slice: forgotten, it is
		// found again in kids.
		nodes[i].firstChild, nodes[i].next, nodes[i].children, nodes[i].lastKid = -1, -1, 0, 0
	}
	for i := range th.nodes {
		k := idx[i]
		if k < 0 {
			continue
		}
		prev = append(prev, lt.prev[i])
		ids = append(ids, lt.id[i])
		p := int32(-1)
		if i > 0 {
			p = idx[lt.parent[i]]
			pn := &nodes[p]
			nodes[k].next, pn.firstChild = pn.firstChild, k
			pn.children++
			kids[uint64(p)<<32|uint64(nodes[k].fn)] = k
		}
		parent = append(parent, p)
	}
	for i := range th.stack {
		th.stack[i].node = idx[th.stack[i].node]
	}
	th.nodes, th.kids = nodes, kids
	lt.prev, lt.parent, lt.id = prev, parent, ids
}

package report

import (
	"fmt"
	"io"
	"time"

	"trueprof/internal/model"
)

// AggregatedJSON describes an aggregated recording (record --aggregate):
// its trees were built while recording and the trace holds their
// snapshots, not the events.
type AggregatedJSON struct {
	// Snapshots counts the snapshots in the trace, every SnapshotNS;
	// Resets the times the trees started over (trueprof ctl reset).
	Snapshots  int    `json:"snapshots"`
	SnapshotNS uint64 `json:"snapshot_ns"`
	Resets     int    `json:"resets,omitempty"`
	// Nodes is the number of nodes the recorder held at the last
	// snapshot; PrunedNodes the nodes folded into "(pruned)" nodes to
	// bound its memory (--tree-memory), PrunedNS the cum wall time they
	// held when folded (calibrated). The totals stay exact.
	Nodes       uint64  `json:"nodes"`
	TreeMemory  int64   `json:"tree_memory,omitempty"`
	PrunedNodes uint64  `json:"pruned_nodes"`
	PrunedNS    float64 `json:"pruned_ns"`
}

// aggregatedJSON returns the description of p when it is an aggregated
// recording, else nil.
func aggregatedJSON(p *model.Profile) *AggregatedJSON {
	if !p.Aggregated() {
		return nil
	}
	a := &AggregatedJSON{}
	if h := p.Header.Aggregate; h != nil {
		a.SnapshotNS, a.TreeMemory = h.SnapshotNS, h.TreeMemory
	}
	if t := p.Tree; t != nil {
		a.Snapshots, a.Resets, a.Nodes, a.PrunedNodes, a.PrunedNS = t.Snapshots, t.Resets, t.Nodes, t.Pruned, t.PrunedNS
	}
	return a
}

// writeAggregatedText writes the header lines of an aggregated
// recording; nothing for a nil a.
func writeAggregatedText(w io.Writer, a *AggregatedJSON) {
	if a == nil {
		return
	}
	fmt.Fprintf(w, "Aggregated: trees built while recording: %s every %v, %d nodes", plural(uint64(a.Snapshots), "snapshot", "snapshots"),
		time.Duration(a.SnapshotNS), a.Nodes)
	if a.Resets > 0 {
		fmt.Fprintf(w, ", reset %s (the totals are since the last)", plural(uint64(a.Resets), "time", "times"))
	}
	fmt.Fprintf(w, "; no events: callflow and timeline need a recording without --aggregate\n")
	if a.PrunedNodes > 0 {
		fmt.Fprintf(w, "Pruned:     %s folded into (pruned) nodes to bound the trees' memory (%.1f MiB), holding %s; totals exact\n",
			plural(a.PrunedNodes, "node", "nodes"), float64(a.TreeMemory)/(1<<20), formatNS(a.PrunedNS))
	}
}

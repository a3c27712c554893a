package record

import (
	"errors"
	"fmt"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// DefaultSnapshot is the interval between tree snapshots of an
// aggregated recording when Config.Snapshot is zero.
const DefaultSnapshot = time.Second

// ErrNotAggregated is returned by a reset of a recording that was not
// started with --aggregate: it has no aggregates to start over.
var ErrNotAggregated = errors.New("the recording is not aggregated (record --aggregate)")

// checkAggregate rejects aggregation settings the recorder cannot honour
// with probe mechanism mech (chooseMech's) and fills in their defaults.
func checkAggregate(cfg *Config, mech Mech) error {
	if !cfg.Aggregate {
		if cfg.Snapshot != 0 || cfg.TreeMemory != 0 {
			return errors.New("--snapshot and --tree-memory need --aggregate")
		}
		return nil
	}
	switch {
	case mech == MechAuto:
		return errors.New("--aggregate folds function entries and exits into call trees: it needs probes (--trace, --root, or a -finstrument-functions build); a sampling recording is small already")
	case cfg.Mode == trace.ModeWrap:
		return errors.New("--aggregate cannot be used with --mode wrap: the trees' snapshots build on each other, and wrap mode discards old chunks")
	case cfg.Snapshot < 0:
		return fmt.Errorf("--snapshot %v: want a positive interval", cfg.Snapshot)
	case cfg.Snapshot > 0 && cfg.Snapshot < 10*time.Millisecond:
		return fmt.Errorf("--snapshot %v: want at least 10ms", cfg.Snapshot)
	case cfg.TreeMemory < 0:
		return fmt.Errorf("--tree-memory %d: want a positive size", cfg.TreeMemory)
	}
	if cfg.Snapshot == 0 {
		cfg.Snapshot = DefaultSnapshot
	}
	return nil
}

// aggregateGCPercent is the collector's setting (GOGC) while recording
// with --aggregate. The recorder's heap is then mostly the hook spool and
// the trees, which allocate nothing per event; the little it allocates
// meanwhile (the hook clock's copies, the trace's chunks: about 1 MB/s
// on the dense load) let the heap grow to twice what is live with the
// default of 100, and the RSS rose from 70 to 110 MB over the first 35 s
// of a dense recording. At 25 the heap stays within a quarter of what is
// live, at a collection every ten seconds or so.
const aggregateGCPercent = 25

// collectorPercent is the collector's setting for a recording with cfg
// once its heap has grown past what holdCollector holds it back for:
// aggregateGCPercent when aggregating, the process's own otherwise.
func (cfg *Config) collectorPercent() int {
	if cfg.Aggregate {
		return aggregateGCPercent
	}
	return -1
}

// aggregator folds the recording's records, as they are written, into
// call trees (calltree.Live) and writes their snapshots in place of the
// events: the recorder's half of record --aggregate (docs/aggregate.md).
type aggregator struct {
	tables *model.Tables
	live   *calltree.Live
	every  time.Duration
	next   time.Time // the next snapshot is due
	// err is the first record the tables refused, which ends the
	// recording at the next snapshot: the recorder wrote something it
	// never defined.
	err    error
	resets int    // trueprof ctl reset's
	events uint64 // folded so far
}

// writerOptions returns the trace writer's options for the recording of
// s with header h, set up for aggregation when asked: h then says so,
// and every record the writer accepts goes to the aggregator.
func (s *session) writerOptions(h *trace.Header) (trace.Options, error) {
	opt := trace.Options{Mode: s.cfg.Mode, SizeLimit: s.cfg.SizeLimit}
	if !s.cfg.Aggregate {
		return opt, nil
	}
	h.Aggregate = &trace.Aggregate{SnapshotNS: uint64(s.cfg.Snapshot), TreeMemory: s.cfg.TreeMemory}
	ag := &aggregator{every: s.cfg.Snapshot, next: time.Now().Add(s.cfg.Snapshot)}
	ag.tables = model.NewTables(*h, func(r *model.Record) { ag.live.Record(r) })
	live, err := calltree.NewLive(ag.tables.Profile(), calltree.Options{Root: h.Root}, true)
	if err != nil {
		return opt, err
	}
	live.Bound(s.cfg.TreeMemory)
	ag.live = live
	opt.Observe = ag.observe
	s.agg = ag
	return opt, nil
}

// aggregateGoroutines makes an aggregated recording of a Go target
// keep its trees by goroutine too (calltree.Live.FollowGoroutines), so
// that report --by goroutine reads them: called when the goroutine
// switches are followed, before the target runs.
func (s *session) aggregateGoroutines() {
	if s.agg == nil {
		return
	}
	if err := s.agg.live.FollowGoroutines(); err != nil {
		fmt.Fprintf(s.log, "trueprof: aggregated per thread only: %v\n", err)
	}
}

// observe reads a record the writer accepted into the tables (and, for
// the time-ordered ones, the trees).
func (ag *aggregator) observe(r trace.Record) {
	switch r.(type) {
	case *trace.TreeThread, *trace.TreeNode, *trace.TreeMark:
		return // the trees' own snapshots
	}
	threads, err := ag.tables.Add(r)
	if err != nil && ag.err == nil {
		ag.err = fmt.Errorf("aggregating: %w", err)
	}
	if threads {
		ag.live.ThreadsChanged()
	}
}

// aggregateEvent folds a function entry or exit into the trees instead
// of writing it, and prunes the trees when they outgrow --tree-memory
// (looked at every pruneCheck events: new nodes come with events).
func (s *session) aggregateEvent(e *trace.Event) error {
	ag := s.agg
	ag.observe(e)
	if ag.events++; ag.events%pruneCheck == 0 && ag.live.Over() {
		return ag.live.Prune(e.Time, s.w)
	}
	return nil
}

// tickCheck is how many records a drain processes between two looks at
// the snapshot clock (tick): a drain of a large backlog (kernel records
// with stacks to unwind, a uprobe ring) would otherwise delay the
// snapshot until its end. At the dense load's 13M events a second, some
// 5 ms.
const tickCheck = 1 << 16

// pruneCheck is how many events pass between two looks at the trees'
// size: at most half as many nodes, some 40 KB, are created meanwhile.
const pruneCheck = 256

// tick ends the collector's hold once it ran a cycle (checkCollector),
// and writes a snapshot when one is due, flushed to the file so that a
// recorder killed later loses at most the interval since. The snapshots
// keep their cadence: one late by less than an interval does not delay
// the next.
func (s *session) tick() error {
	checkCollector()
	ag := s.agg
	if ag == nil {
		return nil
	}
	now := time.Now()
	if now.Before(ag.next) {
		return nil
	}
	if ag.next = ag.next.Add(ag.every); ag.next.Before(now) {
		ag.next = now.Add(ag.every)
	}
	if err := s.snapshotTrees(perf.Now()); err != nil {
		return err
	}
	return s.w.Flush()
}

// snapshotTrees writes a snapshot of the trees at time now (nothing
// when not aggregating).
func (s *session) snapshotTrees(now uint64) error {
	ag := s.agg
	if ag == nil {
		return nil
	}
	if ag.err != nil {
		return ag.err
	}
	if err := ag.live.Snapshot(now, s.w); err != nil {
		return err
	}
	return ag.live.Prune(now, s.w) // samples grow the trees too
}

// resetTrees starts the aggregates over at time now (trueprof ctl
// reset): what the trees hold so far is written first, so that the
// trace keeps it up to the reset.
func (s *session) resetTrees(now uint64) error {
	if s.agg == nil {
		return ErrNotAggregated
	}
	if err := s.snapshotTrees(now); err != nil {
		return err
	}
	if err := s.agg.live.Reset(now, s.w); err != nil {
		return err
	}
	return s.w.Flush()
}

// finishTrees ends the trees at time end, the End record's: every open
// call closes as a reader of every event would close it, and the last
// snapshot is written.
func (s *session) finishTrees(end uint64) error {
	ag := s.agg
	if ag == nil {
		return nil
	}
	if ag.err != nil {
		return ag.err
	}
	return ag.live.Finish(end, s.detached, s.w)
}

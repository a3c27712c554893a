package calltree

import (
	"runtime"
	"sync"

	"trueprof/internal/model"
)

// minShardRecords is how many records a recording needs before its
// threads are replayed in parallel: below it, starting the workers costs
// more than it saves.
const minShardRecords = 1 << 16

// shardsFor returns how many replays share the analysis of p: two when
// two CPUs are available, threads are analysed on their own (not
// ByGoroutine: a goroutine moves between threads) and the recording is
// large enough; else one.
func shardsFor(p *model.Profile, o Options) int {
	records := len(p.Events) + len(p.Samples) + len(p.Switches)
	if o.ByGoroutine || runtime.GOMAXPROCS(0) < 2 || len(p.Threads) < 2 || records < minShardRecords {
		return 1
	}
	return 2
}

// mine reports whether the records of thread tid of process pid are this
// replay's to analyse: with several shards, each takes the threads whose
// pid^tid falls to it, and every thread's records go to one shard.
func (a *replay) mine(pid, tid uint32) bool {
	return a.shards < 2 || (pid^tid)%a.shards == a.shard
}

// batchRecords is how many records the merge hands a shard at once.
const batchRecords = 4096

// runShards replays the records and sweeps the threads at the end. With
// several shards, a merges the records in time order, as run does, and
// hands each, in batches, to the replay of the shard its thread falls to
// (mine); those run in parallel, each over its own threads, which they
// sweep at the end. Then a gathers their threads and counts. Threads
// share nothing during a replay, and result sorts them and sums in that
// order, so the Result is the same, bit for bit, whatever the number of
// shards and the order they finish in.
func (a *replay) runShards(shards int) {
	if shards < 2 {
		a.run()
		a.sweep()
		return
	}
	type shard struct {
		w          *replay
		full, free chan []uint64
		buf        []uint64
	}
	ss := make([]shard, shards)
	var wg sync.WaitGroup
	for k := range ss {
		w := *a
		w.shard, w.shards = uint32(k), uint32(shards)
		w.os = map[threadKey]*osThread{}
		w.goroutines = map[threadKey]*thread{}
		w.recent = map[uint64]*incarnation{}
		w.last, w.g = nil, nil // a groups the samples, in the merge's order
		w.bounds = newSwitchBounds(a.p)
		w.order, w.buf, w.stacks = nil, nil, nil
		s := &ss[k]
		s.w, s.full, s.free = &w, make(chan []uint64, 2), make(chan []uint64, 3)
		for range 3 {
			s.free <- make([]uint64, 0, batchRecords)
		}
		s.buf = <-s.free
		wg.Add(1)
		go func() {
			defer wg.Done()
			streams := w.streams()
			for batch := range s.full {
				// A record is its stream's index << 56 | its own.
				for _, r := range batch {
					streams[r>>56].do(int(r & (1<<56 - 1)))
				}
				s.free <- batch[:0]
			}
			w.sweep()
		}()
	}
	send := func(s *shard, k, i int) {
		s.buf = append(s.buf, uint64(k)<<56|uint64(i))
		if len(s.buf) == batchRecords {
			s.full <- s.buf
			s.buf = <-s.free
		}
	}
	n := uint32(shards)
	merge(a.streams(), func(k, i int, key uint32) {
		if a.g != nil {
			a.group(k, i)
		}
		if a.bounds != nil && recordOrder[k] == model.RecordSwitch && !a.p.Switches[i].Out {
			// Every shard's switch bounds follow every switch-in.
			for j := range ss {
				send(&ss[j], k, i)
			}
			return
		}
		send(&ss[key%n], k, i)
	})
	for k := range ss {
		ss[k].full <- ss[k].buf
		close(ss[k].full)
	}
	wg.Wait()
	for _, s := range ss {
		a.order = append(a.order, s.w.order...)
		a.dropped += s.w.dropped
		a.rootEntered = a.rootEntered || s.w.rootEntered
	}
}

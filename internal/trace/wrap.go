package trace

import (
	"cmp"
	"slices"
)

// Wrap mode keeps, per thread, the most recent samples and events that
// fit the budget (docs/trace-format.md, Modes). Each thread fills chunks
// of its own (openChunk, on the Writer's goroutine); sealed chunks are
// compressed and kept by the pipeline's goroutine (wrapStore), which
// discards the oldest chunk of the thread holding the most bytes until
// the retained chunks fit Options.SizeLimit, less what the file's other
// records take (so that the whole file stays within it), but at least
// half of it. A thread that went quiet
// therefore keeps its last events however busy the others are later,
// and busy threads share what is left equally.

// threadKey is one incarnation of a thread: a thread id that exits and
// comes back (reused by the kernel) gets a new gen, so the two never
// share a chunk or a budget.
type threadKey struct {
	pid, tid, gen uint32
}

func (k threadKey) compare(o threadKey) int {
	return cmp.Or(cmp.Compare(k.pid, o.pid), cmp.Compare(k.tid, o.tid), cmp.Compare(k.gen, o.gen))
}

// openChunk is the chunk of samples and events a thread is filling.
type openChunk struct {
	key   threadKey
	b     chunkBuilder
	first uint64 // time of its first sample or event
	// depth is the thread's call depth relative to where the chunk
	// began (entries minus exits) and low the lowest it has been since.
	// A full chunk ends where depth is back at low: discarding the
	// chunks before that point cuts the fewest calls open.
	depth, low int
	// exit is the time of the thread's Exit record, 0 while it runs.
	exit uint64
}

// note updates the call depth after event e.
func (c *openChunk) note(e *Event) {
	switch e.Kind {
	case EventEntry:
		c.depth++
	case EventExit:
		c.depth--
		c.low = min(c.low, c.depth)
	}
}

// full reports whether the chunk should end here: at target raw bytes
// once the call depth is at its lowest, at twice that regardless.
func (c *openChunk) full(target int) bool {
	n := len(c.b.raw)
	return n >= target && (c.depth <= c.low || n >= 2*target)
}

// storedChunk is a complete chunk (header and payload) held in memory.
type storedChunk struct {
	data        []byte
	records     uint32 // samples and events
	first, last uint64 // times of its first and last sample or event
}

// wrapStore holds the compressed chunks of samples and events of every
// thread incarnation within limit bytes. Only the pipeline's goroutine
// touches it, and the Writer after pipeline.sync.
type wrapStore struct {
	limit   int64
	threads map[threadKey]*retained
	bytes   int64
	// discarded counts the samples and events of the chunks discarded;
	// discardedTime is the newest of their times.
	discarded     uint64
	discardedTime uint64
}

// retained is one thread's chunks, oldest first.
type retained struct {
	chunks []storedChunk
	bytes  int64
}

func newWrapStore(limit int64) *wrapStore {
	return &wrapStore{limit: limit, threads: make(map[threadKey]*retained)}
}

// add keeps c as the newest chunk of thread k, then discards chunks
// until the store fits its limit less outside, the bytes of the file
// already taken by other records.
func (s *wrapStore) add(k threadKey, c storedChunk, outside int64) {
	t := s.threads[k]
	if t == nil {
		t = &retained{}
		s.threads[k] = t
	}
	t.chunks = append(t.chunks, c)
	t.bytes += int64(len(c.data))
	s.bytes += int64(len(c.data))
	s.fit(outside)
}

// fit discards chunks until the store fits its limit less outside, or
// half its limit if outside takes more: the samples and events of a
// small limit are what a user asked for, and the other records of a
// sampled recording can take a 16 KiB file by themselves.
func (s *wrapStore) fit(outside int64) {
	budget := max(s.limit-outside, s.limit/2)
	for s.bytes > budget {
		s.evict()
	}
}

// evict discards the oldest chunk of the thread holding the most bytes
// (of two alike, the lower key, so that the outcome does not depend on
// map order).
func (s *wrapStore) evict() {
	var vk threadKey
	var v *retained
	for k, t := range s.threads {
		if v == nil || t.bytes > v.bytes || t.bytes == v.bytes && k.compare(vk) < 0 {
			v, vk = t, k
		}
	}
	old := v.chunks[0]
	// Delete rather than reslice, so the backing array does not keep
	// discarded chunks alive.
	v.chunks = slices.Delete(v.chunks, 0, 1)
	v.bytes -= int64(len(old.data))
	s.bytes -= int64(len(old.data))
	s.discarded += uint64(old.records)
	s.discardedTime = max(s.discardedTime, old.last)
	if len(v.chunks) == 0 {
		delete(s.threads, vk)
	}
}

// ordered returns the retained chunks by the time of their first
// record; a thread's chunks keep their order.
func (s *wrapStore) ordered() []storedChunk {
	keys := make([]threadKey, 0, len(s.threads))
	n := 0
	for k, t := range s.threads {
		keys = append(keys, k)
		n += len(t.chunks)
	}
	slices.SortFunc(keys, threadKey.compare)
	all := make([]storedChunk, 0, n)
	for _, k := range keys {
		all = append(all, s.threads[k].chunks...)
	}
	slices.SortStableFunc(all, func(a, b storedChunk) int { return cmp.Compare(a.first, b.first) })
	return all
}

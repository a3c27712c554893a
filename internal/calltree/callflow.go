package calltree

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
)

// FlowKind says what a callflow line is.
type FlowKind string

// Callflow line kinds.
const (
	FlowEntry FlowKind = "entry" // a function entry
	FlowExit  FlowKind = "exit"  // the exit of the call on top of the shadow stack
	// FlowPopped is a call closed without its exit, because the exit of
	// a caller further down the shadow stack arrived (a repair). It is
	// synthesised: its Delta is zero and the exit line follows it.
	FlowPopped FlowKind = "exit-missing"
	// FlowUnmatched is an exit that matched no open call and was ignored
	// (its Delta still ends the interval before it).
	FlowUnmatched FlowKind = "exit-unmatched"
	// FlowUnclosed is a call still open when the thread ended, closed
	// then (synthesised, zero Delta; the FlowEnd line before it has the
	// interval).
	FlowUnclosed FlowKind = "exit-end"
	// FlowDetach is when the probes came off, on a thread with calls
	// still open: its Delta is the interval since the last event, and a
	// FlowDetached line (synthesised, zero Delta) follows for each call.
	FlowDetach   FlowKind = "detach"
	FlowDetached FlowKind = "exit-detach"
	// FlowEnd is the thread's end (its exit, or the end of the
	// recording): its Delta is the interval since the last event, which
	// would otherwise be lost; Level, Name and Module are those of the
	// call then current (the thread's root outside any call).
	FlowEnd FlowKind = "end"
)

// FlowEvent is one line of a callflow (log-gen): an event of a
// thread with the metrics of the interval since the thread's previous
// event.
type FlowEvent struct {
	TimeNS uint64   `json:"time_ns"`
	Kind   FlowKind `json:"kind"`
	// Level is the depth of the call entered or exited (1 for a thread's
	// outermost calls); for an unmatched exit, the current depth plus 1.
	Level  int    `json:"level"`
	Name   string `json:"name"`
	Module string `json:"module"`
	// Delta is the interval that ended at this event: raw and calibrated
	// wall time, CPU time, dispatches, interrupts and samples taken in
	// it; for the thread's first event, since its baseline (its creation
	// or the start of recording). Zero for synthesised lines.
	Delta Metrics `json:"delta"`
}

// FlowThread is the callflow of one thread incarnation or, with
// Options.ByGoroutine, goroutine (Goroutine set, TID 0). Its lines are
// read back with Each: the analysis keeps them compactly, and past a
// bound in a temporary file (flowStore), since a callflow has a line per
// event and a recording can have hundreds of millions.
type FlowThread struct {
	PID       uint32
	TID       uint32
	Start     uint64 // as Thread.Start
	Name      string
	Goroutine *uint64
	// Lines is how many lines Each yields, FirstNS the time of the
	// first (the earliest: they are in time order).
	Lines   int
	FirstNS uint64

	log  *flowLog
	t    *Table
	root string
}

// Each calls fn with each line of the thread in time order, and stops at
// the first error fn returns, or reading the lines back fails; it
// returns that error. The FlowEvent is reused for the next line.
func (ft *FlowThread) Each(fn func(*FlowEvent) error) error {
	var e FlowEvent
	var t uint64
	var buf []byte
	for _, c := range ft.log.chunks {
		data := c.data
		if data == nil {
			// Its chunks are few KiB each and read in order: the page
			// cache reads ahead.
			buf = slices.Grow(buf[:0], c.size)[:c.size]
			if _, err := ft.log.store.file.ReadAt(buf, c.off); err != nil {
				return fmt.Errorf("calltree: reading back the callflow's lines: %w", err)
			}
			data = buf
		}
		for len(data) > 0 {
			var err error
			if data, err = ft.decode(data, &t, &e); err != nil {
				return err
			}
			if err := fn(&e); err != nil {
				return err
			}
		}
	}
	return nil
}

// errFlowLine is a line Each cannot decode: the store's own encoding, so
// only a bug (or the temporary file changed behind its back) reaches it.
var errFlowLine = errors.New("calltree: a callflow line does not decode")

// decode decodes the line at the start of data into e, t being the time
// of the line before, and returns the rest of data.
func (ft *FlowThread) decode(data []byte, t *uint64, e *FlowEvent) ([]byte, error) {
	if len(data) < 1 {
		return nil, errFlowLine
	}
	kind := int(data[0])
	data = data[1:]
	var v [3]int64
	for i := range v {
		x, n := binary.Varint(data)
		if n <= 0 {
			return nil, errFlowLine
		}
		v[i], data = x, data[n:]
	}
	mask, n := binary.Uvarint(data)
	if n <= 0 || kind >= len(flowKinds) {
		return nil, errFlowLine
	}
	data = data[n:]
	*t += uint64(v[0])
	*e = FlowEvent{TimeNS: *t, Kind: flowKinds[kind], Level: int(v[1])}
	if v[2] < 0 {
		e.Name = ft.root
	} else {
		f := ft.t.Func(FuncID(v[2]))
		e.Name, e.Module = f.Name, f.Module
	}
	for i, p := range e.Delta.fields() {
		if mask&(1<<i) == 0 {
			continue
		}
		if p.f != nil {
			if len(data) < 8 {
				return nil, errFlowLine
			}
			*p.f, data = math.Float64frombits(binary.LittleEndian.Uint64(data)), data[8:]
			continue
		}
		x, n := binary.Uvarint(data)
		if n <= 0 {
			return nil, errFlowLine
		}
		*p.u, data = x, data[n:]
	}
	return data, nil
}

// flowKinds numbers the line kinds in the store.
var flowKinds = []FlowKind{FlowEntry, FlowExit, FlowPopped, FlowUnmatched, FlowUnclosed, FlowDetach, FlowDetached, FlowEnd}

// metricField is a field of Metrics, a float or a count.
type metricField struct {
	f *float64
	u *uint64
}

// fields returns m's fields, in the store's order.
func (m *Metrics) fields() [11]metricField {
	return [11]metricField{{f: &m.WallNS}, {u: &m.WallNSRaw}, {f: &m.DeltaNS}, {f: &m.CPUNS},
		{u: &m.Dispatches}, {u: &m.Voluntary}, {u: &m.Involuntary}, {u: &m.Interrupts}, {u: &m.InterruptNS},
		{u: &m.Samples}, {u: &m.Period}}
}

// flows returns the callflows of a's threads, Result.Flows when
// Options.Flow is set: per thread (sorted by PID, then goroutines by id,
// then TID and Start), the ordered entries and exits the replay
// analyses, each with the metrics of the interval before it, and the
// thread's end. Repairs appear as synthesised lines. Threads without
// events are left out.
func (a *replay) flows(threads []*thread) []FlowThread {
	out := []FlowThread{}
	for _, th := range threads {
		if th.flow.lines == 0 {
			continue
		}
		th.flow.finish()
		ft := FlowThread{PID: th.key.pid, TID: th.key.tid, Start: th.key.start, Name: th.name,
			Lines: th.flow.lines, FirstNS: th.flow.first, log: &th.flow, t: a.t, root: th.root}
		if th.key.goroutine {
			ft.Goroutine = &th.key.goid
		}
		out = append(out, ft)
	}
	return out
}

// flowStore keeps the callflow lines of a replay's threads, each
// thread's in chunks of its own (flowLog), some 30 bytes a line where a
// FlowEvent takes 150: a 60M-event recording's callflow had taken 24 GB
// in FlowEvents. Past flowMemory bytes of chunks, the next ones go to a
// temporary file, deleted at once and closed by Result.Close, so that
// the memory of a callflow is bounded whatever
// the recording's length: the file takes what a recording has beyond
// that, as uftrace's per-thread data files do. The shards of a replay
// share the store; it locks only when a chunk is full.
type flowStore struct {
	mu    sync.Mutex
	limit int      // flowMemory, but in tests
	mem   int      // bytes of chunks kept in memory
	file  *os.File // the spill file, once created
	size  int64    // bytes written to it
	// err is the first error creating or writing the file: the chunks
	// are then kept in memory, and the Result warns.
	err error
}

// flowMemory bounds the chunks a flowStore keeps in memory.
const flowMemory = 16 << 20

// flowChunk is the size at which a thread's chunk is handed to the
// store: small, since each thread holds one growing, large enough that
// the file's writes and reads are few.
const flowChunk = 16 << 10

// flowLog is the lines of one thread: finished chunks and the one being
// filled.
type flowLog struct {
	store       *flowStore
	chunks      []storedChunk
	cur         []byte
	lines       int
	first, last uint64 // the times of the first and latest lines
}

// storedChunk is a chunk in memory (data) or in the store's file (size
// bytes at off).
type storedChunk struct {
	data []byte
	off  int64
	size int
}

// add appends a line: at time t, of kind, at level, of function fn (-1:
// the thread's root), with the interval's metrics d (nil: zero).
func (l *flowLog) add(s *flowStore, t uint64, kind FlowKind, level int, fn FuncID, d *Metrics) {
	if l.lines == 0 {
		l.store, l.first = s, t // its time is from 0: Each starts there
	}
	b := append(l.cur, byte(slices.Index(flowKinds, kind)))
	b = binary.AppendVarint(b, int64(t-l.last))
	b = binary.AppendVarint(b, int64(level))
	b = binary.AppendVarint(b, int64(fn))
	var mask uint64
	if d != nil {
		for i, p := range d.fields() {
			if p.f != nil && math.Float64bits(*p.f) != 0 || p.u != nil && *p.u != 0 {
				mask |= 1 << i
			}
		}
	}
	b = binary.AppendUvarint(b, mask)
	if mask != 0 {
		for _, p := range d.fields() {
			switch {
			case p.f != nil && math.Float64bits(*p.f) != 0:
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(*p.f))
			case p.u != nil && *p.u != 0:
				b = binary.AppendUvarint(b, *p.u)
			}
		}
	}
	l.cur, l.last = b, t
	l.lines++
	if len(l.cur) >= flowChunk {
		l.finish()
	}
}

// finish hands the chunk being filled to the store.
func (l *flowLog) finish() {
	if len(l.cur) == 0 {
		return
	}
	c := l.store.keep(l.cur)
	l.chunks = append(l.chunks, c)
	if c.data == nil {
		l.cur = l.cur[:0] // written out: its memory is reused
	} else {
		l.cur = nil
	}
}

// close closes the spill file, if any.
func (s *flowStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	return err
}

// keep stores a chunk (full, or a thread's last): in memory while the store holds less than
// flowMemory, else at the end of its file.
func (s *flowStore) keep(b []byte) storedChunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem+len(b) <= s.limit || s.err != nil {
		s.mem += len(b)
		return storedChunk{data: b}
	}
	if s.file == nil {
		f, err := os.CreateTemp("", "trueprof-callflow-*")
		if err != nil {
			s.err = fmt.Errorf("calltree: the callflow's lines outgrow %d MiB of memory, and the temporary file for the rest: %w", s.limit>>20, err)
			s.mem += len(b)
			return storedChunk{data: b}
		}
		os.Remove(f.Name()) // unlinked: gone when closed, whatever happens
		s.file = f
	}
	if _, err := s.file.WriteAt(b, s.size); err != nil {
		s.err = fmt.Errorf("calltree: writing the callflow's lines to a temporary file: %w", err)
		s.mem += len(b)
		return storedChunk{data: b}
	}
	c := storedChunk{off: s.size, size: len(b)}
	s.size += int64(len(b))
	return c
}

package web

import (
	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// recordPass counts, in one pass over a trace's records (a loaded
// profile's, or a stream's as calltree.BuildStreamEach reads them), what
// the page shows of them besides the trees: per thread incarnation the
// timeline's bins and on-CPU intervals and the samples per source line;
// which stacks were sampled and which functions entered (their files and
// lines); the samples per leaf location (the disassembly). Its memory is
// per thread, stack and location, never per record.
type recordPass struct {
	p           *model.Profile
	first, last uint64 // the timeline's axis
	stacks      []bool // by stack id: sampled
	entries     []bool // by location id: a function entry
	leaves      map[uint32]uint64
	owners      []*recordOwner
	byKey       map[ownerKey]*recordOwner
	// recent is, per pid and tid, the owner of the last record and the
	// times ThreadSpan gave for it: records come in time order, so an
	// owner is looked up once per incarnation rather than per record.
	recent map[[2]uint32]ownerSpan
	// hits caches, per stack id, its distinct source lines.
	hits map[uint32][]lineHit
}

// ownerKey is a thread incarnation; th is nil for a thread the trace
// does not describe.
type ownerKey struct {
	pid, tid uint32
	th       *model.Thread
}

type ownerSpan struct {
	o           *recordOwner
	from, until uint64
}

// recordOwner is what recordPass counts for one thread incarnation.
type recordOwner struct {
	ownerKey
	samples, events []uint32 // per timeline bin
	running         [][2]uint64
	in              uint64 // when it was last switched in; 0 when out
	truncated       bool   // running was cut at maxRunning intervals
	lines           map[fileLine]lineCount
}

type fileLine struct {
	file string
	line int
}

type lineCount struct{ self, total uint64 }

// lineHit is a source line on a stack: self when the leaf executes it.
type lineHit struct {
	fileLine
	self bool
}

// newRecordPass returns a pass over p's records whose timeline spans
// first to last (trace clock).
func newRecordPass(p *model.Profile, first, last uint64) *recordPass {
	if last <= first {
		last = first + 1
	}
	return &recordPass{p: p, first: first, last: last, stacks: make([]bool, len(p.Stacks)),
		entries: make([]bool, len(p.Locations)), leaves: map[uint32]uint64{}, byKey: map[ownerKey]*recordOwner{},
		recent: map[[2]uint32]ownerSpan{}, hits: map[uint32][]lineHit{}}
}

// widen extends the span first..last to t; 0 means unknown and is
// skipped.
func widen(first, last, t uint64) (uint64, uint64) {
	if t == 0 {
		return first, last
	}
	if first == 0 || t < first {
		first = t
	}
	return first, max(last, t)
}

// recordSpan is the span of p's records and of its threads' lifetimes (a
// thread created before its first record starts on the axis, not
// before it): what a stream's First and Last give with the lifetimes.
func recordSpan(p *model.Profile) (first, last uint64) {
	for i := range p.Samples {
		first, last = widen(first, last, p.Samples[i].Time)
	}
	for i := range p.Events {
		first, last = widen(first, last, p.Events[i].Time)
	}
	for i := range p.Switches {
		first, last = widen(first, last, p.Switches[i].Time)
	}
	for i := range p.Adjusts {
		first, last = widen(first, last, p.Adjusts[i].Time)
	}
	for i := range p.IRQs {
		first, last = widen(first, last, p.IRQs[i].Time)
	}
	for i := range p.GoIDs {
		first, last = widen(first, last, p.GoIDs[i].Time)
	}
	for _, t := range p.Threads {
		first, last = widen(first, last, t.Start)
		first, last = widen(first, last, t.End)
	}
	return first, last
}

// loaded passes over the records of a loaded profile that the page
// counts: samples, events and switches, each kind in time order.
func (rp *recordPass) loaded(p *model.Profile) {
	var r model.Record
	r.Kind = model.RecordSample
	for i := range p.Samples {
		r.Sample = p.Samples[i]
		rp.record(&r)
	}
	r.Kind = model.RecordEvent
	for i := range p.Events {
		r.Event = p.Events[i]
		rp.record(&r)
	}
	r.Kind = model.RecordSwitch
	for i := range p.Switches {
		r.Switch = p.Switches[i]
		rp.record(&r)
	}
}

// bin is the timeline bin of time t.
func (rp *recordPass) bin(t uint64) int {
	if t < rp.first {
		return 0
	}
	return min(timelineBins-1, int(float64(t-rp.first)/float64(rp.last-rp.first)*timelineBins))
}

// owner returns the counts of the incarnation of pid/tid at time t.
func (rp *recordPass) owner(pid, tid uint32, t uint64) *recordOwner {
	k := [2]uint32{pid, tid}
	c, ok := rp.recent[k]
	if ok && t >= c.from && t < c.until {
		return c.o
	}
	th, from, until := rp.p.ThreadSpan(pid, tid, t)
	key := ownerKey{pid, tid, th}
	o := rp.byKey[key]
	if o == nil {
		o = &recordOwner{ownerKey: key, samples: make([]uint32, timelineBins), events: make([]uint32, timelineBins),
			lines: map[fileLine]lineCount{}}
		rp.byKey[key] = o
		rp.owners = append(rp.owners, o)
	}
	rp.recent[k] = ownerSpan{o, from, until}
	return o
}

// record counts one record.
func (rp *recordPass) record(r *model.Record) {
	switch r.Kind {
	case model.RecordSample:
		s := &r.Sample
		o := rp.owner(s.PID, s.TID, s.Time)
		o.samples[rp.bin(s.Time)]++
		if s.Stack == 0 || int(s.Stack) >= len(rp.stacks) {
			return
		}
		rp.stacks[s.Stack] = true
		rp.leaves[rp.p.Stacks[s.Stack].Location]++
		for _, h := range rp.lineHits(s.Stack) {
			c := o.lines[h.fileLine]
			c.total++
			if h.self {
				c.self++
			}
			o.lines[h.fileLine] = c
		}
	case model.RecordEvent:
		e := &r.Event
		rp.owner(e.PID, e.TID, e.Time).events[rp.bin(e.Time)]++
		if e.Entry && int(e.Function) < len(rp.entries) {
			rp.entries[e.Function] = true
		}
	case model.RecordSwitch:
		s := &r.Switch
		o := rp.owner(s.PID, s.TID, s.Time)
		switch {
		case !s.Out:
			o.in = s.Time
		case o.in != 0:
			if len(o.running) < maxRunning {
				o.running = append(o.running, [2]uint64{o.in, s.Time})
			} else {
				o.truncated = true
			}
			o.in = 0
		}
	}
}

// lineHits returns the distinct source lines of stack id's locations
// (each location's innermost frame: the line executing in it), self
// for the leaf's.
func (rp *recordPass) lineHits(id uint32) []lineHit {
	if hs, ok := rp.hits[id]; ok {
		return hs
	}
	hs := []lineHit{}
	for j, loc := range rp.p.Stack(id, nil) {
		frames, _ := calltree.Frames(rp.p, loc)
		if len(frames) == 0 {
			continue
		}
		fr := frames[0]
		if fr.File == "" || fr.Line <= 0 {
			continue
		}
		fl := fileLine{fr.File, fr.Line}
		dup := false
		for k := range hs {
			if hs[k].fileLine == fl {
				hs[k].self = hs[k].self || j == 0
				dup = true
			}
		}
		if !dup {
			hs = append(hs, lineHit{fl, j == 0})
		}
	}
	rp.hits[id] = hs
	return hs
}

package model

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrBadLabel: a label pattern of Filter.Labels is not KEY=GLOB.
var ErrBadLabel = errors.New("label pattern is not KEY=VALUE")

// Filter selects the records of a profile that a report, an export or
// the web page shows: one process and/or some threads, and the
// goroutines carrying some runtime/pprof labels. The zero Filter keeps
// everything. Every view applies the same Filter through one Matcher
// (Compile), so they all keep the same records.
type Filter struct {
	PID, TID       uint32
	HasPID, HasTID bool // whether PID and TID are set
	// Thread keeps the thread incarnations one of whose names matches
	// this glob, or whose tid it is when a number (MatchThread): names
	// are stable from run to run, tids are not.
	Thread string
	// Labels keeps the records of goroutines that carry matching
	// runtime/pprof labels at their time: KEY=GLOB patterns, ANDed
	// across keys and ORed within one (LabelMatcher), which say which
	// request or job the goroutine serves.
	Labels []string
}

// Compile checks f's patterns and returns the Matcher that applies f.
// A bad thread glob gives an error wrapping path.ErrBadPattern, a bad
// label pattern one wrapping ErrBadLabel.
func (f Filter) Compile() (*Matcher, error) {
	if err := CheckThreadPattern(f.Thread); err != nil {
		return nil, err
	}
	labels, err := ParseLabels(f.Labels)
	if err != nil {
		return nil, err
	}
	return &Matcher{f: f, labels: labels, threads: map[*Thread]bool{}}, nil
}

// Match reports whether a record of thread tid of process pid,
// incarnation th (nil when the trace does not know it), passes f's
// process and thread selection. It matches the glob anew at each call:
// per record, use a Matcher, which remembers the answer per incarnation.
func (f Filter) Match(pid, tid uint32, th *Thread) bool {
	return (!f.HasPID || pid == f.PID) && (!f.HasTID || tid == f.TID) && (f.Thread == "" || MatchThread(f.Thread, tid, th))
}

// String describes f for report headers: `pid 42 tid 43 thread
// "worker-*" label "k=v"`, or "" for the zero Filter.
func (f Filter) String() string {
	var parts []string
	if f.HasPID {
		parts = append(parts, fmt.Sprintf("pid %d", f.PID))
	}
	if f.HasTID {
		parts = append(parts, fmt.Sprintf("tid %d", f.TID))
	}
	if f.Thread != "" {
		parts = append(parts, fmt.Sprintf("thread %q", f.Thread))
	}
	for _, l := range f.Labels {
		parts = append(parts, fmt.Sprintf("label %q", l))
	}
	return strings.Join(parts, " ")
}

// ErrNoMatch is what Filter.Check's error is (errors.Is): the filter
// keeps nothing of the trace.
var ErrNoMatch = errors.New("the filter matches nothing")

// noMatchError says what a filter matched nothing of; it is ErrNoMatch.
type noMatchError struct{ msg string }

func (e noMatchError) Error() string        { return e.msg }
func (e noMatchError) Is(target error) bool { return target == ErrNoMatch }

// Check returns an error that is ErrNoMatch when f keeps nothing of p:
// no thread of p passes its process and thread selection (the error
// lists p's threads), or no goroutine of a selected process ever carries
// labels its label patterns match (the error lists the labels carried).
// An empty report would look like an idle program. Every report, export
// and the web page check their filter with it before writing; nil for
// the zero Filter.
func (f Filter) Check(p *Profile) error {
	if f.HasPID || f.HasTID || f.Thread != "" {
		kept := false
		for _, t := range p.Threads {
			if f.Match(t.PID, t.TID, t) {
				kept = true
				break
			}
		}
		if !kept {
			names := make([]string, len(p.Threads))
			for i, t := range p.Threads {
				names[i] = fmt.Sprintf("%s (pid %d tid %d)", t.Name, t.PID, t.TID)
			}
			return noMatchError{fmt.Sprintf("no thread of the trace matches %s; threads: %s", f.without(true), listSome(names))}
		}
	}
	if len(f.Labels) == 0 {
		return nil
	}
	labels, err := ParseLabels(f.Labels)
	if err != nil {
		return err
	}
	var carried []string
	seen := map[string]bool{}
	for i := range p.Labels {
		l := &p.Labels[i]
		if f.HasPID && l.PID != f.PID {
			continue
		}
		if labels.Match(l.Pairs) {
			return nil
		}
		for _, pair := range l.Pairs {
			if kv := pair.Key + "=" + pair.Value; !seen[kv] {
				seen[kv] = true
				carried = append(carried, kv)
			}
		}
	}
	slices.Sort(carried)
	return noMatchError{fmt.Sprintf("no goroutine of the trace carries %s; labels carried: %s", f.without(false), listSome(carried))}
}

// without describes f's thread selection (threads) or its label patterns
// alone, as String does.
func (f Filter) without(threads bool) string {
	g := f
	if threads {
		g.Labels = nil
	} else {
		g.HasPID, g.HasTID, g.Thread = false, false, ""
	}
	return g.String()
}

// listSome joins the first items of list, saying how many more there are
// (a trace may have thousands of threads), or says "none".
func listSome(list []string) string {
	const most = 20
	if len(list) == 0 {
		return "none"
	}
	if len(list) <= most {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:most], ", "), len(list)-most)
}

// Matcher applies a compiled Filter: a report compiles its Filter once
// and every analysis and view of it asks the one Matcher. The nil
// Matcher keeps everything. It is safe for concurrent use (the replays
// of calltree's shards share it).
type Matcher struct {
	f      Filter
	labels LabelMatcher
	mu     sync.Mutex
	// threads is Thread's answer per known incarnation, under mu.
	threads map[*Thread]bool
}

// Filter returns the Filter m applies, the zero Filter for nil.
func (m *Matcher) Filter() Filter {
	if m == nil {
		return Filter{}
	}
	return m.f
}

// Thread reports whether the records of thread tid of process pid,
// incarnation t (nil when the trace does not know it), pass the
// filter's process and thread selection. A glob is matched once per
// incarnation, not once per record.
func (m *Matcher) Thread(pid, tid uint32, t *Thread) bool {
	if m == nil {
		return true
	}
	if t == nil || m.f.Thread == "" {
		return m.f.Match(pid, tid, t)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ok, seen := m.threads[t]
	if !seen {
		ok = m.f.Match(pid, tid, t)
		m.threads[t] = ok
	}
	return ok
}

// LabelMatcher returns the filter's label patterns, nil when it has
// none (and for the nil Matcher).
func (m *Matcher) LabelMatcher() LabelMatcher {
	if m == nil {
		return nil
	}
	return m.labels
}

// Labels reports whether a goroutine carrying pairs passes the filter's
// label patterns; true when there are none.
func (m *Matcher) Labels(pairs []LabelPair) bool { return m.LabelMatcher().Match(pairs) }

// MatchThread reports whether pattern names thread tid, incarnation mt
// (nil when the trace does not know it): a decimal number names the
// thread with that tid, anything else is a path.Match glob that one of
// its names must match. Every view selects threads with it so that all
// of them keep the same ones.
func MatchThread(pattern string, tid uint32, mt *Thread) bool {
	if n, err := strconv.ParseUint(pattern, 10, 32); err == nil {
		return uint32(n) == tid
	}
	if mt == nil {
		return false
	}
	for _, name := range mt.Names {
		if ok, _ := path.Match(pattern, name); ok {
			return true
		}
	}
	ok, _ := path.Match(pattern, mt.Name)
	return ok
}

// CheckThreadPattern returns an error wrapping path.ErrBadPattern when
// pattern is not a valid MatchThread pattern; MatchThread matches
// nothing with it.
func CheckThreadPattern(pattern string) error {
	if _, err := path.Match(pattern, ""); err != nil {
		return fmt.Errorf("thread pattern %q: %w", pattern, err)
	}
	return nil
}

// LabelMatcher selects goroutines by their runtime/pprof labels, the
// way a Go program says which request or job a goroutine serves. It
// holds KEY=GLOB patterns: a goroutine matches when, for every key the
// patterns name, it carries that key with a value one of the key's globs
// (path.Match) matches. The zero LabelMatcher matches everything.
type LabelMatcher map[string][]string

// ParseLabels makes the LabelMatcher of patterns ("worker=2",
// "tenant=a*"); it fails with ErrBadLabel, wrapped with the pattern,
// for one without "=" or with a bad glob.
func ParseLabels(patterns []string) (LabelMatcher, error) {
	var m LabelMatcher
	for _, p := range patterns {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q", ErrBadLabel, p)
		}
		if _, err := path.Match(v, ""); err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrBadLabel, p, err)
		}
		if m == nil {
			m = LabelMatcher{}
		}
		m[k] = append(m[k], v)
	}
	return m, nil
}

// Match reports whether a goroutine carrying labels passes m.
func (m LabelMatcher) Match(labels []LabelPair) bool {
	for k, globs := range m {
		found := false
		for _, l := range labels {
			if l.Key != k {
				continue
			}
			for _, g := range globs {
				if ok, _ := path.Match(g, l.Value); ok {
					found = true
				}
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// FilterLabels returns p with only the samples, events, interrupts and
// adjustments of the goroutines that carry labels m matches at their
// time: a thread's record belongs to the goroutine it last switched to,
// and a record before its first switch to none, which carries no labels.
// Context and goroutine switches stay, so that time off CPU and the
// goroutines' runs are measured as before. The result shares p's other
// slices; p is unchanged. It returns p itself for the zero m.
func FilterLabels(p *Profile, m LabelMatcher) *Profile {
	if len(m) == 0 {
		return p
	}
	labels := p.GoLabels()
	// The goroutine each thread runs, advanced through p.GoIDs in time
	// order: every filtered slice is sorted by time.
	keep := func() func(t uint64, pid, tid uint32) bool {
		running := map[[2]uint32]uint64{}
		g := 0
		return func(t uint64, pid, tid uint32) bool {
			for ; g < len(p.GoIDs) && p.GoIDs[g].Time <= t; g++ {
				r := &p.GoIDs[g]
				running[[2]uint32{r.PID, r.TID}] = r.GoID
			}
			goid, ok := running[[2]uint32{pid, tid}]
			return ok && m.Match(labels.At(pid, goid, t))
		}
	}
	q := *p
	q.Samples = filterTimed(p.Samples, keep(), func(r *Sample) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID })
	q.Events = filterTimed(p.Events, keep(), func(r *Event) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID })
	q.IRQs = filterTimed(p.IRQs, keep(), func(r *IRQ) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID })
	q.Adjusts = filterTimed(p.Adjusts, keep(), func(r *Adjust) (uint64, uint32, uint32) { return r.Time, r.PID, r.TID })
	return &q
}

// filterTimed returns the records of rs, sorted by time, that keep keeps.
func filterTimed[R any](rs []R, keep func(t uint64, pid, tid uint32) bool, key func(*R) (uint64, uint32, uint32)) []R {
	var out []R
	for i := range rs {
		if keep(key(&rs[i])) {
			out = append(out, rs[i])
		}
	}
	return out
}

// LabelMap is the JSON form of the labels a goroutine carried
// (GoLabels.Carried): the values of a key it carried several of are
// joined by commas, in order. Nil for no labels.
func LabelMap(pairs []LabelPair) map[string]string {
	if len(pairs) == 0 {
		return nil
	}
	m := map[string]string{}
	for _, l := range pairs {
		if v, ok := m[l.Key]; ok {
			m[l.Key] = v + "," + l.Value
		} else {
			m[l.Key] = l.Value
		}
	}
	return m
}

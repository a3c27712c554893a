package web

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/report"
	"trueprof/internal/trace"
)

// Data is everything the page shows, computed once from a profile: the
// call-stack trees of every thread incarnation in columnar form (the
// flame graph), the engine's functions table with callers and callees
// for each thread selection the page offers (the table, the detail, the
// call graph), plus line-level samples and the timeline. One blob serves
// both the server and the HTML file, so both show the same numbers.
type Data struct {
	Title string `json:"title"`
	// Kind is "sampling" or "instrumented": instrumented trees have exact
	// calls, per-call min/max and calibrated times.
	Kind    string       `json:"kind"`
	Metrics []MetricInfo `json:"metrics"`
	// Header is the report package's JSON header (flat view): the same
	// totals and warnings the text reports print.
	Header json.RawMessage `json:"header"`

	Modules   []string  `json:"modules"`
	Files     []string  `json:"files"`
	Funcs     Funcs     `json:"funcs"`
	Processes []Process `json:"processes"`
	Threads   []Thread  `json:"threads"`
	Nodes     Nodes     `json:"nodes"`
	Lines     Lines     `json:"lines"`
	Timeline  Timeline  `json:"timeline"`
	// Tables are the functions tables of the thread selections; Scopes
	// names each selection ("all", "p:PID", "t:INDEX" in Threads, "sel"
	// for Selection) with the index of its table.
	Tables []FuncTable    `json:"tables"`
	Scopes map[string]int `json:"scopes"`

	// Sources and Disasm are filled for the HTML file only (the server
	// answers /source and /disasm instead): file name to contents, and
	// function index to its instructions.
	Sources map[string]string `json:"sources,omitempty"`
	// Code holds, for probed functions, which lines of their File have
	// code and which run whenever they are called (see FuncCode).
	Code   map[int]*FuncCode    `json:"code,omitempty"`
	Disasm map[int]*Disassembly `json:"disasm,omitempty"`
	// Server tells the page it may ask /source and /disasm.
	Server bool `json:"server"`
	// Selection is the threads the command line asked for (report
	// --pid, --tid, --thread): the page opens with them selected, and
	// its thread selector can still choose any other.
	Selection *Selection `json:"selection,omitempty"`

	// models are the incarnations of Threads (nil: not described by the
	// trace), for filters.
	models []*model.Thread
	// leaves are the samples per leaf location, for the disassembly.
	leaves map[uint32]uint64
	// trees are the analysed threads of Threads; metrics makes a node's
	// metrics the columns of Metrics; funcIndex finds a function of
	// Funcs by name and module; tableOf finds a table of Tables by its
	// threads: what a selection's table is computed from.
	trees     []*calltree.Thread
	metrics   func(*calltree.Metrics) []float64
	funcIndex map[[2]string]int
	tableOf   map[string]int
}

// Selection is a set of threads chosen outside the page.
type Selection struct {
	Label   string `json:"label"`
	Threads []int  `json:"threads"` // indices in Data.Threads
}

// Select records the threads of d that f matches as the page's initial
// selection; label says how they were chosen. It fails when none does.
func (d *Data) Select(f model.Filter, label string) error {
	s := &Selection{Label: label, Threads: []int{}}
	for i, t := range d.Threads {
		if f.Match(t.PID, t.TID, d.models[i]) {
			s.Threads = append(s.Threads, i)
		}
	}
	if len(s.Threads) == 0 {
		return fmt.Errorf("%s: no thread of the trace matches", label)
	}
	d.Selection = s
	d.scope("sel", s.Threads)
	return nil
}

// MetricInfo names one column of Nodes.Base: Key is what the page's
// metric selector uses, Unit how to print it ("ns" or "count").
type MetricInfo struct {
	Key   string `json:"key"`
	Label string `json:"label"`
	Unit  string `json:"unit"`
}

// Funcs are the functions, columnar: index i is one function (name,
// module) as the reports identify them.
type Funcs struct {
	Name   []string `json:"name"`
	Module []int    `json:"module"` // index in Data.Modules
	File   []int    `json:"file"`   // index in Data.Files, -1 unknown
	Line   []int    `json:"line"`   // smallest line seen in File (the entry's, when probed), 0 unknown
	// Decl is the line of File declaring the function (DWARF's
	// DW_AT_decl_line, else the line of its entry address), 0 unknown:
	// where the source view opens.
	Decl []int `json:"decl"`
	// Probed marks functions an instrumented recording placed a probe
	// on from its start: one without calls was never executed. Lazily
	// placed probes (--root) prove nothing: the first calls came first.
	Probed []bool `json:"probed"`
	// Recursive marks functions with a node under a node of their own
	// (calltree's Node.Recursion above 0) in any thread.
	Recursive []bool `json:"recursive"`
}

// Process is a process of the trace.
type Process struct {
	PID  uint32 `json:"pid"`
	Name string `json:"name"`
}

// Thread is one thread incarnation and the root of its tree in Nodes.
type Thread struct {
	PID   uint32 `json:"pid"`
	TID   uint32 `json:"tid"`
	Name  string `json:"name"`
	Start uint64 `json:"start"` // 0: existed before recording
	End   uint64 `json:"end"`   // 0: still running at the end
	Root  int    `json:"root"`  // index in Nodes
}

// Nodes are the nodes of every thread's call-stack tree, columnar and in
// pre-order (a parent comes before its children). A thread's root has
// Func −1 and Parent −1.
type Nodes struct {
	Parent []int `json:"parent"`
	Func   []int `json:"func"`
	// Calls is nil for a sampling profile (calls are not counted).
	Calls []uint64 `json:"calls,omitempty"`
	// Base holds one column per metric (Data.Metrics): what was measured
	// while the node was the current one. The page sums cum itself.
	Base [][]float64 `json:"base"`
	// MinSelf and MaxSelf are per-call self wall times (instrumented).
	MinSelf []float64 `json:"min,omitempty"`
	MaxSelf []float64 `json:"max,omitempty"`
}

// Lines are line-level sample counts per thread, columnar: samples whose
// leaf is at File:Line (Self) and samples with File:Line anywhere on the
// stack (Total, once per sample).
type Lines struct {
	Thread []int    `json:"thread"`
	File   []int    `json:"file"`
	Line   []int    `json:"line"`
	Self   []uint64 `json:"self"`
	Total  []uint64 `json:"total"`
}

// Timeline holds, per thread (same index as Data.Threads), sample and
// event counts in Bins equal intervals from First to Last (trace clock,
// ns), and the intervals the thread was on a CPU when the recording has
// context switches.
type Timeline struct {
	First   uint64        `json:"first"`
	Last    uint64        `json:"last"`
	Bins    int           `json:"bins"`
	Samples [][]uint32    `json:"samples"`
	Events  [][]uint32    `json:"events"`
	Running [][][2]uint64 `json:"running"`
	// Truncated says Running was cut at maxRunning intervals for a thread.
	Truncated []bool `json:"truncated"`
}

const (
	timelineBins = 400
	maxRunning   = 4000
)

// builder interns functions, modules and files while Data is built.
type builder struct {
	p     *model.Profile
	d     *Data
	funcs map[[2]string]int
	mods  map[string]int
	files map[string]int
	// locFuncs caches, per location, the function indices of its frames
	// outermost first.
	locFuncs map[uint32][]int
	// phys is, per function, a location whose physical (outermost)
	// frame it is: where its machine code is.
	phys map[int]uint32
	// calls, minSelf and maxSelf are the node columns of an
	// instrumented recording, which Nodes has only then.
	calls            []uint64
	minSelf, maxSelf []float64
}

// Build computes the page's data for the loaded profile p: the trees of
// calltree.Build (an instrumented recording's (with function events)
// calls, of the recording's root's subgraph for a --root recording, as
// the reports; any other's sample stacks) and the per-record counts of
// the timeline and the source lines. It fails only when the analysis
// does. BuildStream does the same without holding the records.
func Build(p *model.Profile, title string) (*Data, error) {
	first, last := recordSpan(p)
	rp := newRecordPass(p, first, last)
	rp.loaded(p)
	var res *calltree.Result
	var header any
	var err error
	instrumented := p.HasCalls()
	if instrumented {
		if res, err = calltree.Build(p, calltree.Options{Root: p.Header.Root}); err != nil {
			return nil, err
		}
		header = report.InstrHeaderOf(p, res)
	} else {
		if res, err = calltree.Build(p, calltree.Options{}); err != nil {
			return nil, err
		}
		h := report.NewHeader(p, model.Filter{})
		h.View = "flat"
		header = h
	}
	return newData(p, title, res, header, rp)
}

// BuildStream is Build over a trace read in two passes: the trees and
// the per-record counts come from one pass over the records
// (calltree.BuildStreamEach), none of which is kept, so that memory is
// the trees and the page's data however many events the trace holds. A
// label filter or a trace too far out of order cannot stream: the error
// then wraps model.ErrNotStreamable.
func BuildStream(s *model.Stream, title string) (*Data, error) {
	p := s.Profile
	first, last := s.First, s.Last
	for _, t := range p.Threads {
		first, last = widen(first, last, t.Start)
		first, last = widen(first, last, t.End)
	}
	rp := newRecordPass(p, first, last)
	instrumented := p.HasCalls()
	o := calltree.Options{}
	if instrumented {
		o.Root = p.Header.Root
	}
	res, samples, err := calltree.BuildStreamEach(s, o, rp.record)
	if err != nil {
		return nil, err
	}
	var header any
	if instrumented {
		header = report.InstrHeaderOfStream(s, res, samples)
	} else {
		h := report.NewHeaderStream(s, samples)
		h.View = "flat"
		header = h
	}
	return newData(p, title, res, header, rp)
}

// newData makes the page's data of res, the analysis of p, with the
// header of the reports and the counts of rp, the pass over p's records:
// of calls when instrumented (function events, or an aggregated
// recording's trees of them), else of samples.
func newData(p *model.Profile, title string, res *calltree.Result, header any, rp *recordPass) (*Data, error) {
	funcs := map[[2]string]int{}
	b := &builder{p: p, d: &Data{Title: title, funcIndex: funcs, tableOf: map[string]int{}}, funcs: funcs, mods: map[string]int{},
		files: map[string]int{}, locFuncs: map[uint32][]int{}, phys: map[int]uint32{}}
	d := b.d
	d.leaves = rp.leaves
	for _, pr := range p.Processes {
		d.Processes = append(d.Processes, Process{PID: pr.PID, Name: pr.Name})
	}
	if p.HasCalls() {
		b.instrumented(res, rp)
	} else {
		h, _ := header.(report.Header)
		b.sampling(res, rp, h.ShareBy == "period")
	}
	b.functionTables()
	var err error
	if d.Header, err = json.Marshal(header); err != nil {
		return nil, err
	}
	b.lines(rp)
	b.code()
	b.timeline(rp)
	return d, nil
}

// fn interns function (name, module); file and line are remembered from
// the first frame that has them.
func (b *builder) fn(name, module, file string, line int) int {
	k := [2]string{name, module}
	i, ok := b.funcs[k]
	f := &b.d.Funcs
	if !ok {
		i = len(f.Name)
		b.funcs[k] = i
		f.Name = append(f.Name, name)
		f.Module = append(f.Module, b.module(module))
		f.File = append(f.File, -1)
		f.Line = append(f.Line, 0)
		f.Decl = append(f.Decl, 0)
		f.Probed = append(f.Probed, false)
		f.Recursive = append(f.Recursive, false)
	}
	// The smallest line seen is the nearest to the function's start:
	// samples land anywhere inside it, an entry probe on its first line.
	switch {
	case file == "":
	case f.File[i] < 0:
		f.File[i] = b.file(file)
		f.Line[i] = line
	case line > 0 && line < f.Line[i] && b.d.Files[f.File[i]] == file:
		f.Line[i] = line
	}
	return i
}

func (b *builder) module(m string) int { return intern(b.mods, &b.d.Modules, m) }

func (b *builder) file(f string) int { return intern(b.files, &b.d.Files, f) }

// intern returns the index of s in list, appending it when new.
func intern(index map[string]int, list *[]string, s string) int {
	i, ok := index[s]
	if !ok {
		i = len(*list)
		index[s] = i
		*list = append(*list, s)
	}
	return i
}

// location returns the function indices of location id's frames,
// outermost (physical) first.
func (b *builder) location(id uint32) []int {
	if fs, ok := b.locFuncs[id]; ok {
		return fs
	}
	frames, module := calltree.Frames(b.p, id)
	fs := make([]int, 0, len(frames))
	for k := len(frames) - 1; k >= 0; k-- {
		fr := frames[k]
		fs = append(fs, b.fn(fr.Function, module, fr.File, fr.Line))
	}
	b.locFuncs[id] = fs
	if len(fs) > 0 {
		if _, ok := b.phys[fs[0]]; !ok {
			b.phys[fs[0]] = id
		}
	}
	return fs
}

// sampling shows the sample stack trees of res, calltree's analysis of a
// sampling recording: a node's base is the samples (and period) whose
// stack ends there, the period first when byPeriod. Threads without
// samples are left out.
func (b *builder) sampling(res *calltree.Result, rp *recordPass, byPeriod bool) {
	d := b.d
	d.Kind = "sampling"
	unit := "count"
	if model.PeriodUnit(b.p.Header.Event) == "nanoseconds" {
		unit = "ns"
	}
	// The metric the page shows first is the one the reports' shares
	// weigh by (report.Header.ShareBy): the period when the event's
	// period adapts.
	samples, period := MetricInfo{Key: "samples", Label: "samples", Unit: "count"}, MetricInfo{Key: "period", Label: "period", Unit: unit}
	columns := func(m *calltree.Metrics) []float64 { return []float64{float64(m.Samples), float64(m.Period)} }
	d.Metrics = []MetricInfo{samples, period}
	if byPeriod {
		d.Metrics = []MetricInfo{period, samples}
		columns = func(m *calltree.Metrics) []float64 { return []float64{float64(m.Period), float64(m.Samples)} }
	}
	// The sampled stacks' locations give the functions their files and
	// lines, which the tree nodes do not carry.
	var locs []uint32
	for id, seen := range rp.stacks {
		if seen {
			for _, l := range b.p.Stack(uint32(id), locs[:0]) {
				b.location(l)
			}
		}
	}
	b.trees(res, func(th *calltree.Thread) bool { return th.Root.Cum.Samples > 0 }, columns)
}

// instrumented shows the trees of res, calltree's analysis of an
// instrumented recording: exact calls, calibrated times and per-call
// extremes.
func (b *builder) instrumented(res *calltree.Result, rp *recordPass) {
	d := b.d
	d.Kind = "instrumented"
	d.Metrics = []MetricInfo{
		{Key: "wall", Label: "wall time", Unit: "ns"},
		{Key: "cpu", Label: "CPU time", Unit: "ns"},
		{Key: "dispatches", Label: "dispatches", Unit: "count"},
		{Key: "samples", Label: "samples", Unit: "count"},
	}
	// Function entry locations give the file and line of instrumented
	// functions, which the tree nodes do not carry.
	for id, entered := range rp.entries {
		if entered {
			b.location(uint32(id))
		}
	}
	for _, pr := range b.p.Probes {
		fs := b.location(pr.Function)
		if pr.Mech != trace.ProbeDynamic {
			d.Funcs.Probed[fs[0]] = true
		}
		b.phys[fs[0]] = pr.Function
	}
	b.trees(res, func(*calltree.Thread) bool { return true }, func(m *calltree.Metrics) []float64 {
		return []float64{m.WallNS, m.CPUNS, float64(m.Dispatches), float64(m.Samples)}
	})
	d.Nodes.Calls, d.Nodes.MinSelf, d.Nodes.MaxSelf = b.calls, b.minSelf, b.maxSelf
}

// trees emits the trees of the threads of res that keep selects, in
// pre-order, with the node columns metrics makes of a base (Data.Metrics
// order); calls and per-call extremes go to b.calls, b.minSelf and
// b.maxSelf. This is where a calltree node becomes a node of the page.
func (b *builder) trees(res *calltree.Result, keep func(*calltree.Thread) bool, metrics func(*calltree.Metrics) []float64) {
	d := b.d
	d.metrics = metrics
	d.Nodes.Base = make([][]float64, len(d.Metrics))
	var emit func(n *calltree.Node, parent int, root bool)
	emit = func(n *calltree.Node, parent int, root bool) {
		id := len(d.Nodes.Parent)
		f := -1
		if !root {
			f = b.fn(n.Name, n.Module, "", 0)
			d.Funcs.Recursive[f] = d.Funcs.Recursive[f] || n.Recursion > 0
		}
		nd := &d.Nodes
		nd.Parent = append(nd.Parent, parent)
		nd.Func = append(nd.Func, f)
		for k, v := range metrics(&n.Base) {
			nd.Base[k] = append(nd.Base[k], v)
		}
		b.calls = append(b.calls, n.Calls)
		b.minSelf = append(b.minSelf, n.MinSelfNS)
		b.maxSelf = append(b.maxSelf, n.MaxSelfNS)
		for i := range n.Children {
			emit(&n.Children[i], id, false)
		}
	}
	for _, pr := range res.Processes {
		for i := range pr.Threads {
			th := &pr.Threads[i]
			if !keep(th) {
				continue
			}
			t := Thread{PID: th.PID, TID: th.TID, Name: th.Name, Start: th.Start, Root: len(d.Nodes.Parent)}
			mt := b.p.ThreadAt(th.PID, th.TID, th.Start)
			if mt != nil && mt.Start == th.Start {
				t.End = mt.End
			} else {
				mt = nil
			}
			d.Threads = append(d.Threads, t)
			d.models = append(d.models, mt)
			d.trees = append(d.trees, th)
			emit(&th.Root, -1, true)
		}
	}
}

// threadIndex maps the owners of rp's counts to their Data.Threads
// index: the thread of the same incarnation (or, for records of a thread
// the trace does not describe, of the same pid and tid); -1 when the
// page does not show it.
func (b *builder) threadIndex(rp *recordPass) []int {
	type key struct {
		pid, tid uint32
		th       *model.Thread
	}
	byKey := map[key]int{}
	for i, t := range b.d.Threads {
		byKey[key{t.PID, t.TID, b.d.models[i]}] = i
	}
	out := make([]int, len(rp.owners))
	for j, o := range rp.owners {
		i, ok := byKey[key{o.pid, o.tid, o.th}]
		if !ok {
			i = -1
		}
		out[j] = i
	}
	return out
}

// lines turns rp's line counts into Lines, sorted by thread, file and
// line.
func (b *builder) lines(rp *recordPass) {
	type key struct{ thread, file, line int }
	acc := map[key]lineCount{}
	index := b.threadIndex(rp)
	for j, o := range rp.owners {
		th := index[j]
		if th < 0 {
			continue
		}
		for fl, c := range o.lines {
			k := key{th, b.file(fl.file), fl.line}
			v := acc[k]
			v.self += c.self
			v.total += c.total
			acc[k] = v
		}
	}
	keys := make([]key, 0, len(acc))
	for k := range acc {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y key) int {
		return cmp.Or(cmp.Compare(x.thread, y.thread), cmp.Compare(x.file, y.file), cmp.Compare(x.line, y.line))
	})
	l := &b.d.Lines
	l.Thread, l.File, l.Line, l.Self, l.Total = []int{}, []int{}, []int{}, []uint64{}, []uint64{}
	for _, k := range keys {
		v := acc[k]
		l.Thread = append(l.Thread, k.thread)
		l.File = append(l.File, k.file)
		l.Line = append(l.Line, k.line)
		l.Self = append(l.Self, v.self)
		l.Total = append(l.Total, v.total)
	}
}

// timeline gives each thread of the page its bins and on-CPU intervals
// from rp.
func (b *builder) timeline(rp *recordPass) {
	d := b.d
	tl := &d.Timeline
	tl.First, tl.Last, tl.Bins = rp.first, rp.last, timelineBins
	n := len(d.Threads)
	tl.Samples = make([][]uint32, n)
	tl.Events = make([][]uint32, n)
	tl.Running = make([][][2]uint64, n)
	tl.Truncated = make([]bool, n)
	for i := range n {
		tl.Samples[i] = make([]uint32, timelineBins)
		tl.Events[i] = make([]uint32, timelineBins)
		tl.Running[i] = [][2]uint64{}
	}
	index := b.threadIndex(rp)
	for j, o := range rp.owners {
		th := index[j]
		if th < 0 {
			continue
		}
		for k := range timelineBins {
			tl.Samples[th][k] += o.samples[k]
			tl.Events[th][k] += o.events[k]
		}
		for _, r := range o.running {
			if len(tl.Running[th]) < maxRunning {
				tl.Running[th] = append(tl.Running[th], r)
			} else {
				tl.Truncated[th] = true
			}
		}
		tl.Truncated[th] = tl.Truncated[th] || o.truncated
	}
}

// allowedFiles returns the source files the trace's locations name, the
// only files the server reads.
func allowedFiles(p *model.Profile) map[string]bool {
	ok := map[string]bool{}
	for i := range p.Locations {
		for _, fr := range p.Locations[i].Frames {
			if fr.File != "" {
				ok[fr.File] = true
			}
		}
	}
	return ok
}

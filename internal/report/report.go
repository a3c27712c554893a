package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// Errors returned by Write for options it does not know (a view, format,
// metric or Options.By). They are wrapped with the offending value and
// the list of valid ones.
var (
	ErrUnknownView     = errors.New("unknown report view")
	ErrUnknownFormat   = errors.New("unknown report format")
	ErrUnknownMetric   = errors.New("unknown report metric")
	ErrUnknownGrouping = errors.New("unknown report grouping")
)

// ErrNotInstrumented is returned by Write for an option that only an
// instrumented recording (one with function entry/exit events) has data
// for: the callflow view, Root, or a Metric other than wall. It is
// wrapped with an explanation.
var ErrNotInstrumented = errors.New("needs an instrumented recording")

// Options selects a report.
type Options struct {
	// View is "tprof", "flat", "tree", "arcflow", "callflow" or
	// "threads"; see Views. For an instrumented recording
	// (Profile.Events not empty) flat, tree, arcflow and callflow show
	// the traced calls, tprof the samples taken alongside them; callflow
	// needs such a recording. threads shows each thread incarnation of
	// any recording.
	View   string
	Format string // "text" or "json"; see Formats

	// Filter restricts the report, header counts included, to one
	// process and/or some threads. Percentages are of the filtered
	// total.
	model.Filter

	// By is "thread" or "goroutine"; see Groupings. A Go program's
	// goroutines move between threads, so "goroutine" gives tree,
	// threads and callflow one tree, row or flow per goroutine, and
	// makes an instrumented recording's calls match across threads
	// (changing flat and arcflow too). A thread's records belong to the
	// goroutine it last switched to. tprof, which counts threads,
	// refuses it, and so does a recording without goroutine switches
	// (an error wrapping calltree.ErrNoGoroutines). Empty is the default
	// (defaultBy): "goroutine" for the call views of an instrumented
	// recording with goroutine switches, else "thread".
	By string

	// ExcludeInterrupts removes the time of the interrupts handled while
	// a thread ran from its wall and CPU time (calltree.Options): for
	// repeatable measurements. The views that count samples are
	// unchanged.
	ExcludeInterrupts bool

	// Min is a percentage of the (filtered) total sample count below
	// which rows are hidden: tree prunes nodes (with their subtrees)
	// whose cum% < Min; flat hides functions whose self% < Min; arcflow
	// hides stanzas whose self cum% < Min; tprof hides rows whose
	// ticks% < Min. Zero shows everything. For an instrumented
	// recording the percentages are of the total of Metric, and Min
	// does not apply to callflow (an error if set).
	Min float64

	// The options below apply to the views of an instrumented recording
	// (docs/reports.md). On a sampling-only profile Raw is ignored (its
	// counts are never calibrated); Root and a Metric other than wall
	// are errors wrapping ErrNotInstrumented, as they are with tprof.

	// Raw shows times as recorded: neither the calibrated probe cost nor
	// the time lost to the profiler is subtracted (DELTA is zero).
	Raw bool
	// Metric is what the text columns BASE, CUM, SELF and TOTAL show,
	// and what percentages, Min and the order of rows use: "wall"
	// (calibrated elapsed time, the default when empty), "cpu"
	// (calibrated on-CPU time) or "dispatches"; see MetricNames. JSON
	// always holds every metric.
	Metric string
	// Root restricts the analysis to the calls made while the function
	// of that name is on the thread's stack (Scheme B; see
	// calltree.Options.Root). Empty analyses everything.
	Root string
}

// A view renders the prepared samples; one function per view and format
// keeps each report's computation shared by its text and JSON forms.
type view struct {
	text func(w io.Writer, d *data, o Options) error
	json func(d *data, o Options) (any, error)
	// trees: the view renders calltree's trees (data.result), which
	// the samples are then grouped beside, in the same pass.
	trees bool
}

var views = map[string]view{
	"tprof":   {text: tprofText, json: func(d *data, o Options) (any, error) { return buildTprof(d, o), nil }},
	"flat":    {text: flatText, json: func(d *data, o Options) (any, error) { return buildFlat(d, o) }, trees: true},
	"tree":    {text: treeText, json: func(d *data, o Options) (any, error) { return buildTree(d, o) }, trees: true},
	"arcflow": {text: arcflowText, json: func(d *data, o Options) (any, error) { return buildArcflow(d, o) }, trees: true},
	// callflow has no sampling form: it lists traced entries and exits.
	"callflow": {},
	// threads measures threads from their records, whatever the
	// recording: writeThreads.
	"threads": {},
}

// Views returns the names of the report views, sorted.
func Views() []string {
	names := make([]string, 0, len(views))
	for name := range views {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Formats returns the names of the output formats, sorted.
func Formats() []string { return []string{"json", "text"} }

// Groupings returns the values of Options.By.
func Groupings() []string { return []string{"thread", "goroutine"} }

// defaultBy is Options.By when it is empty: "goroutine" for the call
// views (flat, tree, arcflow, callflow) of an instrumented recording of
// a Go program, whose calls return on whatever thread their goroutine
// runs on then (by thread, trueprof's own report command under uprobes
// had 4,842 calls without an exit and 4,873 exits without a call), and
// "thread" otherwise: for samples, which need no matching, for the
// threads view, which is about threads, and with a thread filter.
func defaultBy(src source, o Options) string {
	calls := o.View == "flat" || o.View == "tree" || o.View == "arcflow" || o.View == "callflow"
	if calls && src.p.HasCalls() && src.goIDs() > 0 && !o.HasTID && o.Thread == "" {
		return "goroutine"
	}
	return "thread"
}

// Write writes the report o.View of p to w in o.Format; WriteStream
// does without holding the records. An unknown view,
// format, metric or grouping is an error (wrapping ErrUnknownView,
// ErrUnknownFormat, ErrUnknownMetric or ErrUnknownGrouping) that lists
// the valid ones; an option the profile has no data for wraps
// ErrNotInstrumented or calltree.ErrNoGoroutines; a bad thread pattern wraps
// path.ErrBadPattern; a failed analysis of an instrumented recording
// wraps calltree's error. Nothing is written then.
func Write(w io.Writer, p *model.Profile, o Options) error {
	if p == nil {
		return errors.New("report: nil profile")
	}
	return write(w, source{p: p}, o)
}

// WriteStream is Write over a trace read in two passes: the views render
// from calltree's analysis of the records, read from the file one at a
// time (calltree.BuildStreamSamples), so that memory does not grow with
// the events; the report is Write's on the same trace, byte for byte. A
// label filter, or a trace too far out of order to stream, gives an
// error wrapping model.ErrNotStreamable before anything is written:
// Load the trace and Write it instead.
func WriteStream(w io.Writer, s *model.Stream, o Options) error {
	if s == nil {
		return errors.New("report: nil stream")
	}
	return write(w, source{p: s.Profile, s: s}, o)
}

// write is Write of a loaded or streamed source.
func write(w io.Writer, src source, o Options) error {
	v, ok := views[o.View]
	if !ok {
		return fmt.Errorf("%w %q (valid: %s)", ErrUnknownView, o.View, strings.Join(Views(), ", "))
	}
	if !slices.Contains(Formats(), o.Format) {
		return fmt.Errorf("%w %q (valid: %s)", ErrUnknownFormat, o.Format, strings.Join(Formats(), ", "))
	}
	if math.IsNaN(o.Min) || o.Min < 0 {
		return fmt.Errorf("report: invalid minimum percentage %v", o.Min)
	}
	mt, ok := metricByName(o.Metric)
	if !ok {
		return fmt.Errorf("%w %q (valid: %s)", ErrUnknownMetric, o.Metric, strings.Join(MetricNames(), ", "))
	}
	if o.By != "" && !slices.Contains(Groupings(), o.By) {
		return fmt.Errorf("%w %q (valid: %s)", ErrUnknownGrouping, o.By, strings.Join(Groupings(), ", "))
	}
	if o.By == "" {
		o.By = defaultBy(src, o)
	}
	m, err := o.Filter.Compile()
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	src.m = m
	if len(o.Labels) > 0 && src.s != nil {
		// Before anything else, so that a caller falls back to Load
		// without replaying the trace in vain.
		return fmt.Errorf("report: %w", calltree.ErrNeedsLoad)
	}
	if len(o.Labels) > 0 && src.goIDs() == 0 {
		return fmt.Errorf("report: labels: %w (not a Go target, or recorded without them)", calltree.ErrNoGoroutines)
	}
	if o.By == "goroutine" {
		if o.View == "tprof" {
			return fmt.Errorf("report: tprof counts the samples of threads: --by goroutine applies to tree, threads, flat, arcflow and callflow")
		}
		if src.goIDs() == 0 {
			return fmt.Errorf("report: by goroutine: %w (not a Go target, or recorded without them)", calltree.ErrNoGoroutines)
		}
	}
	if o.View == "threads" {
		return writeThreads(w, src, o, mt)
	}
	if src.p.HasCalls() {
		if iv, ok := instrViews[o.View]; ok {
			return writeInstr(w, src, o, mt, iv)
		}
	}
	if v.text == nil {
		return fmt.Errorf("report: %s %w (function entry/exit events, from trueprof record --trace or --root); this trace has only samples: use %s",
			o.View, ErrNotInstrumented, strings.Join(slices.DeleteFunc(Views(), func(s string) bool { return s == "callflow" }), ", "))
	}
	what := "this profile has only samples"
	if src.p.HasCalls() {
		what = "the " + o.View + " view counts samples"
	}
	if o.Root != "" {
		return fmt.Errorf("report: a root function %w: %s, which a root cannot restrict", ErrNotInstrumented, what)
	}
	if mt.name != "wall" {
		return fmt.Errorf("report: metric %s %w: %s", mt.name, ErrNotInstrumented, what)
	}
	d, err := prepareSampling(src, o.By == "goroutine", v.trees)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	if o.Format == "json" {
		enc := json.NewEncoder(bw)
		enc.SetIndent("", "  ")
		r, err := v.json(d, o)
		if err != nil {
			return err
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		writeHeaderText(bw, d.header(o.View))
		if err := v.text(bw, d, o); err != nil {
			return err
		}
	}
	// bufio.Writer keeps the first write error; Flush returns it.
	return bw.Flush()
}

// percent returns n as a percentage of total, 0 when total is 0, rounded
// to two decimals so that text and JSON show the same number.
func percent(n, total uint64) float64 {
	if total == 0 {
		return 0
	}
	return math.Round(float64(n)*10000/float64(total)) / 100
}

// hidden reports whether a row of n samples falls below o.Min percent of
// total. The comparison is done on the unrounded percentage.
func hidden(n, total uint64, o Options) bool {
	if o.Min <= 0 {
		return false
	}
	if total == 0 {
		return true
	}
	return float64(n)*100/float64(total) < o.Min
}

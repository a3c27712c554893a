package report

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// Header is what every report starts with: what was recorded and, above
// all, what is missing from it. In JSON its fields are the top-level
// fields of every view.
type Header struct {
	View       string      `json:"view"`
	Event      string      `json:"event"`
	Freq       uint64      `json:"freq,omitempty"`   // samples per second, when frequency based
	Period     uint64      `json:"period,omitempty"` // events per sample, when period based
	PeriodUnit string      `json:"period_unit"`      // unit of the "period" metric: "nanoseconds" or "events"
	StartTime  time.Time   `json:"start_time"`       // wall clock when recording started
	Filter     *FilterJSON `json:"filter,omitempty"`
	// By is "goroutine" when the samples were grouped by goroutine, else
	// absent.
	By string `json:"by,omitempty"`
	// Granularity and NoInlines are how code was grouped
	// (model.Aggregation), absent for the default: functions, inlined
	// functions apart.
	Granularity string `json:"granularity,omitempty"`
	NoInlines   bool   `json:"no_inlines,omitempty"`

	Total calltree.Count `json:"total"` // of the filtered samples
	// ShareBy is what the views' percentages, order and --min weigh a
	// sample by: "samples", or "period" when the event's period adapts
	// (a non-clock event sampled at a frequency: data.byPeriod).
	ShareBy   string `json:"share_by"`
	FirstNS   uint64 `json:"first_ns"`  // time of the first sample (trace clock), 0 if none
	LastNS    uint64 `json:"last_ns"`   // time of the last sample
	SpanNS    uint64 `json:"span_ns"`   // LastNS - FirstNS
	Processes int    `json:"processes"` // processes seen in the trace (that pass the filter)
	Threads   int    `json:"threads"`   // threads seen in the trace (that pass the filter)

	// Lost and Throttled are for the whole trace even when filtered:
	// lost records and throttling do not say which thread they hit.
	Lost       uint64   `json:"lost"` // records lost, all causes
	LostByKind LostJSON `json:"lost_by_kind"`
	Throttled  uint64   `json:"throttled"` // throttle records
	// Paused sums the intervals in which recording was paused (trueprof
	// ctl pause); absent when it never was.
	Paused           *PausedJSON `json:"paused,omitempty"`
	Truncated        uint64      `json:"truncated"`         // filtered samples whose call chain was cut short
	TruncatedPercent float64     `json:"truncated_percent"` // of Total.Samples
	// TruncatedBy splits Truncated by reason ("stack-short", "no-cfi",
	// ...: trace.UnwindReason); absent for traces that give none.
	TruncatedBy map[string]uint64 `json:"truncated_by,omitempty"`
	// Callchain and StackBytes are how user stacks were unwound
	// (trace.Header), absent for frame-pointer recordings.
	Callchain  string `json:"callchain,omitempty"`
	StackBytes int    `json:"stack_bytes,omitempty"`

	Complete  bool   `json:"complete"`             // the trace has its end record
	EndReason string `json:"end_reason,omitempty"` // why recording stopped
	Error     string `json:"error,omitempty"`      // the error that ended reading early
	// ErrorOffset is the byte offset of Error when the reader reported it.
	ErrorOffset *int64 `json:"error_offset,omitempty"`

	// Warnings are sentences about missing data, also printed at the top
	// of text reports. Never null.
	Warnings []string `json:"warnings"`
}

// FilterJSON is the JSON form of a Filter: absent fields are not filtered.
type FilterJSON struct {
	PID    *uint32 `json:"pid,omitempty"`
	TID    *uint32 `json:"tid,omitempty"`
	Thread string  `json:"thread,omitempty"`
}

// filterJSON returns the JSON form of f, nil for the zero Filter.
func filterJSON(f model.Filter) *FilterJSON {
	if !f.HasPID && !f.HasTID && f.Thread == "" {
		return nil
	}
	j := &FilterJSON{Thread: f.Thread}
	if f.HasPID {
		j.PID = &f.PID
	}
	if f.HasTID {
		j.TID = &f.TID
	}
	return j
}

// filter is the Filter j describes.
func (j *FilterJSON) filter() model.Filter {
	f := model.Filter{Thread: j.Thread}
	if j.PID != nil {
		f.PID, f.HasPID = *j.PID, true
	}
	if j.TID != nil {
		f.TID, f.HasTID = *j.TID, true
	}
	return f
}

// LostJSON is model.LostCounts in JSON.
type LostJSON struct {
	Kernel   uint64 `json:"kernel"`   // kernel ring buffer overflows
	Wrap     uint64 `json:"wrap"`     // discarded by wrap mode
	Size     uint64 `json:"size"`     // dropped after the size limit
	Unparsed uint64 `json:"unparsed"` // malformed kernel records
}

// PausedJSON sums a trace's pause intervals (model.Pause).
type PausedJSON struct {
	Intervals int    `json:"intervals"`
	NS        uint64 `json:"ns"`      // their total length
	Dropped   uint64 `json:"dropped"` // samples and events thrown away in them
}

// pausedJSON sums p's pauses, nil when there were none.
func pausedJSON(p *model.Profile) *PausedJSON {
	if len(p.Pauses) == 0 {
		return nil
	}
	j := &PausedJSON{Intervals: len(p.Pauses)}
	for _, x := range p.Pauses {
		j.NS += x.Duration
		j.Dropped += x.Dropped
	}
	return j
}

// NewHeader returns the header of the reports of p restricted by f, with
// an empty View.
func NewHeader(p *model.Profile, f model.Filter) Header {
	m, err := f.Compile()
	if err != nil {
		// Bad patterns keep nothing, as calltree.GroupSamples's.
		return (&data{p: p, Samples: calltree.GroupSamples(p, f, false), src: source{p: p}}).header("")
	}
	return prepare(source{p: p, m: m}, false).header("")
}

// header returns the header of sampling view view. For an instrumented
// recording it warns that the view counts only the samples.
func (d *data) header(view string) Header {
	h := d.baseHeader(view)
	if d.src.p.HasCalls() {
		h.Warnings = append(h.Warnings, fmt.Sprintf("this is an instrumented recording: this report counts only the %d samples taken alongside the traced calls, which the flat, tree, arcflow and callflow views show",
			d.Total.Samples))
	}
	return h
}

// baseHeader is the header of every report of p: what was recorded and
// what is missing, about samples.
func (d *data) baseHeader(view string) Header {
	p, f := d.p, d.Filter
	h := Header{
		View:       view,
		Event:      p.Header.Event,
		Freq:       p.Header.Freq,
		Period:     p.Header.Period,
		PeriodUnit: model.PeriodUnit(p.Header.Event),
		StartTime:  p.Header.StartTime,
		Total:      d.Total,
		ShareBy:    "samples",
		FirstNS:    d.First,
		LastNS:     d.Last,
		SpanNS:     d.Last - d.First,
		Lost:       p.Lost.Total(),
		LostByKind: LostJSON{
			Kernel:   p.Lost.Kernel,
			Wrap:     p.Lost.Wrap,
			Size:     p.Lost.Size,
			Unparsed: p.Lost.Unparsed,
		},
		Throttled:        p.Throttled,
		Paused:           pausedJSON(p),
		Truncated:        d.Truncated,
		TruncatedPercent: d.TruncatedPercent(),
		TruncatedBy:      truncatedBy(d.TruncatedBy),
		StackBytes:       p.Header.StackBytes,
		Complete:         p.End != nil,
		Filter:           filterJSON(f),
	}
	if p.Header.Callchain != "fp" {
		h.Callchain = p.Header.Callchain
	}
	if d.ByGoroutine {
		h.By = "goroutine"
	}
	if d.byPeriod() {
		h.ShareBy = "period"
	}
	h.Granularity, h.NoInlines = granularityJSON(p.Aggregation)
	// A process counts when it passes the filter, and one of its threads
	// does when threads are selected.
	threads := f.HasTID || f.Thread != ""
	procs := map[uint32]bool{}
	for _, t := range p.Threads {
		if f.Match(t.PID, t.TID, t) {
			h.Threads++
			procs[t.PID] = true
		}
	}
	for _, pr := range p.Processes {
		if (!f.HasPID || pr.PID == f.PID) && (!threads || procs[pr.PID]) {
			h.Processes++
		}
	}
	if p.End != nil {
		h.EndReason = p.End.Reason
	}

	if p.Err != nil {
		h.Error = p.Err.Error()
	}
	if fe, ok := errors.AsType[*trace.FormatError](p.Err); ok {
		h.ErrorOffset = &fe.Offset
	}
	h.Warnings = d.Warnings()
	return h
}

func writeHeaderText(w io.Writer, h Header) {
	fmt.Fprintf(w, "Event:      %s\n", eventText(h.Event, h.Freq, h.Period, h.PeriodUnit))
	if !h.StartTime.IsZero() {
		fmt.Fprintf(w, "Start:      %s\n", h.StartTime.Format(time.RFC3339))
	}
	if h.Filter != nil {
		fmt.Fprintf(w, "Filter:     %s\n", h.Filter.filter())
	}
	if h.By != "" {
		fmt.Fprintf(w, "By:         %s (a thread's samples before it ran one stay its own)\n", h.By)
	}
	writeAggregationText(w, h.Granularity, h.NoInlines)
	fmt.Fprintf(w, "Samples:    %d over %v (period sum %d %s)\n",
		h.Total.Samples, time.Duration(h.SpanNS), h.Total.Period, h.PeriodUnit)
	if h.ShareBy == "period" {
		fmt.Fprintf(w, "Shares:     of the period sum: %s's period adapts to its rate, so a sample stands for its period's events (as perf report's Overhead)\n", h.Event)
	}
	fmt.Fprintf(w, "Processes:  %d, threads %d\n", h.Processes, h.Threads)
	if h.Callchain != "" {
		fmt.Fprintf(w, "Callchain:  %s", h.Callchain)
		if h.StackBytes > 0 {
			fmt.Fprintf(w, " (%d-byte stack copies)", h.StackBytes)
		}
		fmt.Fprintln(w)
	}
	writeMissing(w, h.Filter != nil, h.Lost, h.Throttled, h.Paused, h.Truncated, h.TruncatedPercent, h.TruncatedBy, h.Warnings)
}

// truncatedBy names the counts of by that are not zero, nil if none is:
// UnwindNone (traces without reasons) is left out.
func truncatedBy(by [trace.NumUnwindReasons]uint64) map[string]uint64 {
	var m map[string]uint64
	for r, n := range trace.Truncations(&by) {
		if m == nil {
			m = map[string]uint64{}
		}
		m[r.String()] = n
	}
	return m
}

// granularityJSON is a's header fields: nothing for the default.
func granularityJSON(a model.Aggregation) (granularity string, noInlines bool) {
	if a.Granularity != model.Functions {
		granularity = a.Granularity.String()
	}
	return granularity, a.NoInlines
}

// writeAggregationText says how code was grouped, when not as by default.
func writeAggregationText(w io.Writer, granularity string, noInlines bool) {
	if granularity == "" && !noInlines {
		return
	}
	entry := "function"
	switch granularity {
	case "files":
		entry = "source file"
	case "lines":
		entry = "function at a source line"
	case "addresses":
		entry = "function at an instruction (offset in its module)"
	}
	inlines := "inlined functions apart"
	if noInlines {
		inlines = "inlined code charged to the function it was inlined into"
	}
	fmt.Fprintf(w, "Grouping:   each entry a %s; %s\n", entry, inlines)
}

// writeMissing ends every text header with what the profile lacks, so no
// one reads a report without seeing it: lost records, throttling (not
// attributed to threads, so counted for the whole trace when filtered),
// truncated call chains, and warnings.
func writeMissing(w io.Writer, filtered bool, lost, throttled uint64, paused *PausedJSON, truncated uint64, truncatedPercent float64, by map[string]uint64, warnings []string) {
	scope := ""
	if filtered {
		scope = " (whole trace)"
	}
	fmt.Fprintf(w, "Lost:       %d records%s\n", lost, scope)
	fmt.Fprintf(w, "Throttled:  %d%s\n", throttled, scope)
	if paused != nil {
		fmt.Fprintf(w, "Paused:     %s, %s (%d samples and events not recorded)\n",
			plural(uint64(paused.Intervals), "interval", "intervals"), formatNS(float64(paused.NS)), paused.Dropped)
	}
	fmt.Fprintf(w, "Truncated:  %d samples (%.2f%%)", truncated, truncatedPercent)
	// Reasons by count, then name, so the output is deterministic.
	reasons := slices.Collect(maps.Keys(by))
	slices.SortFunc(reasons, func(a, b string) int {
		if c := cmp.Compare(by[b], by[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for i, r := range reasons {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		fmt.Fprintf(w, "%s%s %d", sep, r, by[r])
	}
	fmt.Fprintln(w)
	for _, msg := range warnings {
		fmt.Fprintf(w, "WARNING: %s\n", msg)
	}
	fmt.Fprintln(w)
}

// eventText describes a sampling event as the text headers show it:
// "cpu-clock, 99 Hz" or "cycles, every 100000 events".
func eventText(event string, freq, period uint64, unit string) string {
	switch {
	case freq != 0:
		return fmt.Sprintf("%s, %d Hz", event, freq)
	case period != 0:
		return fmt.Sprintf("%s, every %d %s", event, period, unit)
	}
	return event
}

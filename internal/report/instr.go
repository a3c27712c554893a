package report

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// The views of an instrumented recording (Profile.Events not empty) are
// computed by package calltree; this file holds what they share: the metric
// selection, the header and the number formats.

// instrView renders an analysed instrumented recording; as for the
// sampling views one function computes what text and JSON both show.
// A text that fails stops the report with its error. A report that
// implements jsonStreamer writes its JSON itself.
type instrView func(in *instrData) (text func(w io.Writer) error, report any, err error)

// jsonStreamer is a report too large to build in memory (a callflow):
// it writes the JSON that encoding/json's Encoder, indented by two
// spaces, would write for it.
type jsonStreamer interface {
	streamJSON(w io.Writer) error
}

var instrViews = map[string]instrView{
	"flat":     instrFlatView,
	"tree":     instrTreeView,
	"arcflow":  instrArcflowView,
	"callflow": callflowView,
}

// metric is a column metric of the instrumented views.
type metric struct {
	name string
	of   func(m *calltree.Metrics) float64
	// count: the metric is a number of events, not nanoseconds.
	count bool
}

var metrics = []metric{
	{name: "wall", of: func(m *calltree.Metrics) float64 { return m.WallNS }},
	{name: "cpu", of: func(m *calltree.Metrics) float64 { return m.CPUNS }},
	{name: "dispatches", of: func(m *calltree.Metrics) float64 { return float64(m.Dispatches) }, count: true},
}

// MetricNames returns the names of the metrics Options.Metric selects
// from, the default ("wall") first.
func MetricNames() []string {
	names := make([]string, len(metrics))
	for i, m := range metrics {
		names[i] = m.name
	}
	return names
}

// metricByName returns the metric of Options.Metric; "" is wall.
func metricByName(name string) (metric, bool) {
	if name == "" {
		return metrics[0], true
	}
	for _, m := range metrics {
		if m.name == name {
			return m, true
		}
	}
	return metric{}, false
}

// format formats a value of the metric for text: a duration or a count.
func (mt metric) format(v float64) string {
	if mt.count {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return formatNS(v)
}

// formatNS formats nanoseconds for text reports with four significant
// digits and a unit: "812ns", "2.5ns", "56.7µs", "1.234ms", "2.5s"; "0"
// for zero. JSON reports carry the nanoseconds as numbers.
func formatNS(ns float64) string {
	var b [32]byte
	return string(appendNS(b[:0], ns))
}

// nsUnits are formatNS's units.
var nsUnits = []struct {
	name  string
	scale float64
}{{"ns", 1}, {"µs", 1e3}, {"ms", 1e6}, {"s", 1e9}}

// appendNS appends formatNS(ns) to dst without allocating: a callflow
// formats four durations a line, for every event of a recording.
func appendNS(dst []byte, ns float64) []byte {
	switch {
	case ns == 0:
		return append(dst, '0')
	case ns < 0:
		return appendNS(append(dst, '-'), -ns)
	case math.IsInf(ns, 0) || math.IsNaN(ns):
		return fmt.Append(dst, ns)
	}
	start := len(dst)
	for i, u := range nsUnits {
		v := ns / u.scale
		dst = strconv.AppendFloat(dst[:start], v, 'f', nsDecimals(v), 64)
		s := dst[start:]
		dot := bytes.IndexByte(s, '.')
		whole := len(s) // digits before the point
		if dot >= 0 {
			whole = dot
		}
		if whole >= 4 && i < len(nsUnits)-1 {
			continue // rounds up to the next unit
		}
		if dot >= 0 {
			s = bytes.TrimRight(bytes.TrimRight(s, "0"), ".")
		}
		if len(s) == 1 && s[0] == '0' {
			return dst[:start+1]
		}
		return append(dst[:start+len(s)], u.name...)
	}
	panic("unreachable")
}

// nsDecimals is the number of decimals that give v (positive) four
// significant digits, at most three: 3 − ⌊log₁₀ v⌋ within [0, 3], told
// by comparisons rather than math.Log10, which took a tenth of a
// callflow's time (TestAppendNSIsLogTen holds them equal, next to every
// power of ten too).
func nsDecimals(v float64) int {
	switch {
	case v < 10:
		return 3
	case v < 100:
		return 2
	case v < 1000:
		return 1
	}
	return 0
}

// percentF is percent for the metrics of instrumented recordings.
func percentF(v, total float64) float64 {
	if total == 0 {
		return 0
	}
	return math.Round(v*10000/total) / 100
}

// hiddenF is hidden for the metrics of instrumented recordings.
func hiddenF(v, total float64, o Options) bool {
	if o.Min <= 0 {
		return false
	}
	if total == 0 {
		return true
	}
	return v*100/total < o.Min
}

// instrData is an instrumented recording analysed for a report.
type instrData struct {
	p      *model.Profile
	o      Options
	opts   calltree.Options
	mt     metric
	r      *calltree.Result
	header InstrHeader
	// sampling is the header of the sampling views, with the analysis's
	// warnings: the threads view's of a sampling recording.
	sampling Header
	total    float64 // r.Total of the selected metric
}

// InstrHeader is the header of the reports of an instrumented recording
// (JSON: the top-level fields of its flat, tree, arcflow and callflow
// views). Times are calibrated unless Raw.
type InstrHeader struct {
	View string `json:"view"`
	// Instrument is the probe mechanism: "hook" or "uprobe".
	Instrument string `json:"instrument"`
	// Probes lists the functions probed by uprobes, with when: probes
	// placed while the program ran (ProbeInfo.Late: --root's callees,
	// libraries loaded later) missed the calls made before, probes
	// removed while it ran the calls after. Never null.
	Probes []ProbeInfo `json:"probes"`
	// Metric is what the text columns showed and what percentages, Min
	// and the order of rows use: "wall", "cpu" or "dispatches".
	Metric string `json:"metric"`
	// Event, Freq, Period and PeriodUnit describe the sampling recorded
	// alongside the probes; Event is "dummy" when there was none.
	Event      string      `json:"event"`
	Freq       uint64      `json:"freq,omitempty"`
	Period     uint64      `json:"period,omitempty"`
	PeriodUnit string      `json:"period_unit"`
	StartTime  time.Time   `json:"start_time"`
	Filter     *FilterJSON `json:"filter,omitempty"`
	Root       string      `json:"root,omitempty"` // Options.Root
	// By is what gets a tree (a row, a flow): "thread" or "goroutine".
	By string `json:"by"`
	// Granularity and NoInlines are as in Header.
	Granularity string `json:"granularity,omitempty"`
	NoInlines   bool   `json:"no_inlines,omitempty"`

	// Total is the sum over the analysed threads (samples: those merged
	// into the trees).
	Total  calltree.Metrics `json:"total"`
	Calls  uint64           `json:"calls"`  // function entries analysed
	Events uint64           `json:"events"` // entries and exits analysed
	// FirstNS and LastNS are the first and last analysed event's times
	// (trace clock); SpanNS their difference.
	FirstNS   uint64 `json:"first_ns"`
	LastNS    uint64 `json:"last_ns"`
	SpanNS    uint64 `json:"span_ns"`
	Processes int    `json:"processes"` // processes analysed
	Threads   int    `json:"threads"`   // thread incarnations analysed

	// Raw is Options.Raw. Calibration is the probe cost that was
	// subtracted, null when none was (Raw, none in the trace, or one
	// measured for another mechanism); Calibrated says whether it was.
	Raw         bool               `json:"raw"`
	Calibrated  bool               `json:"calibrated"`
	Calibration *trace.Calibration `json:"calibration"`
	// CPUMeasured tells whether the recording has context switches:
	// without them cpu_ns and dispatches are zero, not measured.
	CPUMeasured bool `json:"cpu_measured"`
	// InterruptsMeasured tells whether the recording has interrupts:
	// without them interrupts and interrupt_ns are zero, not measured.
	// ExcludeInterrupts says their time was removed from wall and CPU
	// time.
	InterruptsMeasured bool `json:"interrupts_measured"`
	ExcludeInterrupts  bool `json:"exclude_interrupts"`
	// SwitchCost is what a preemption cost on CPU, measured in the
	// recording and removed from the calibrated CPU times; null when
	// not (calltree.Result.SwitchCost).
	SwitchCost *calltree.SwitchCost `json:"switch_cost,omitempty"`
	// Repairs counts what the shadow stacks repaired (missing and
	// unmatched exits, calls open at the end); Dropped the events the
	// recorder reported lost.
	Repairs calltree.Repairs `json:"repairs"`
	Dropped uint64           `json:"dropped"`

	// As in Header, for the whole trace even when filtered.
	Lost       uint64      `json:"lost"`
	LostByKind LostJSON    `json:"lost_by_kind"`
	Throttled  uint64      `json:"throttled"`
	Paused     *PausedJSON `json:"paused,omitempty"`
	// Truncated counts the filtered samples whose call chain was cut
	// short, TruncatedPercent their share of the filtered samples.
	Truncated        uint64            `json:"truncated"`
	TruncatedPercent float64           `json:"truncated_percent"`
	TruncatedBy      map[string]uint64 `json:"truncated_by,omitempty"`

	// Aggregated describes an aggregated recording (record
	// --aggregate); null otherwise.
	Aggregated *AggregatedJSON `json:"aggregated,omitempty"`

	Complete    bool   `json:"complete"`
	EndReason   string `json:"end_reason,omitempty"`
	Error       string `json:"error,omitempty"`
	ErrorOffset *int64 `json:"error_offset,omitempty"`

	// Warnings are the trace's (as in Header) and the analysis's
	// (calltree.Result.Warnings: missing calibration or context switches,
	// dropped events, repairs). Never null.
	Warnings []string `json:"warnings"`
}

// analyseInstr analyses src with calltree as o selects and makes the
// header.
func analyseInstr(src source, o Options, mt metric) (*instrData, error) {
	p := src.p
	if o.Root == "" {
		// A --root recording covers its root's subgraph: show that.
		o.Root = p.Header.Root
	}
	opts := calltree.Options{Raw: o.Raw, Root: o.Root, Filter: src.m, ByGoroutine: o.By == "goroutine",
		ExcludeInterrupts: o.ExcludeInterrupts, Flow: o.View == "callflow"}
	r, d, err := src.analyse(opts)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if mt.name != "wall" && !r.CPUMeasured {
		return nil, fmt.Errorf("report: metric %s: the recording has no context switches, so CPU time and dispatches were not measured", mt.name)
	}
	return newInstrData(p, o, opts, mt, r, d), nil
}

// InstrHeaderOf is the header the flat view of p shows for r, calltree.Build's
// analysis of p with the recording's root and no filter: for a caller that
// has the analysis already (the web UI) and must not run it again.
func InstrHeaderOf(p *model.Profile, r *calltree.Result) InstrHeader {
	mt, _ := metricByName("wall")
	o := Options{View: "flat", Root: p.Header.Root}
	return newInstrData(p, o, calltree.Options{Root: o.Root}, mt, r, prepare(source{p: p}, false)).header
}

// newInstrData makes the header of r, analysed with opts, for o; d is
// the samples that pass o.Filter.
func newInstrData(p *model.Profile, o Options, opts calltree.Options, mt metric, r *calltree.Result, d *data) *instrData {
	in := &instrData{p: p, o: o, opts: opts, mt: mt, r: r, total: mt.of(&r.Total)}
	sh := d.baseHeader(o.View)
	h := InstrHeader{
		View:               o.View,
		Instrument:         instrument(p),
		Probes:             probeInfos(p),
		Metric:             mt.name,
		Event:              sh.Event,
		Freq:               sh.Freq,
		Period:             sh.Period,
		PeriodUnit:         sh.PeriodUnit,
		StartTime:          sh.StartTime,
		Filter:             sh.Filter,
		Root:               o.Root,
		By:                 cmp.Or(o.By, "thread"),
		Granularity:        sh.Granularity,
		NoInlines:          sh.NoInlines,
		Total:              r.Total,
		Calls:              r.Calls,
		Events:             r.Events,
		Raw:                r.Raw,
		Calibrated:         r.Calibration != nil,
		Calibration:        r.Calibration,
		CPUMeasured:        r.CPUMeasured,
		SwitchCost:         r.SwitchCost,
		InterruptsMeasured: r.InterruptsMeasured,
		ExcludeInterrupts:  r.ExcludeInterrupts,
		Repairs:            r.Repairs,
		Dropped:            r.Dropped,
		Lost:               sh.Lost,
		LostByKind:         sh.LostByKind,
		Throttled:          sh.Throttled,
		Paused:             sh.Paused,
		Truncated:          sh.Truncated,
		TruncatedPercent:   sh.TruncatedPercent,
		TruncatedBy:        sh.TruncatedBy,
		Complete:           sh.Complete,
		EndReason:          sh.EndReason,
		Error:              sh.Error,
		ErrorOffset:        sh.ErrorOffset,
		Warnings:           append(sh.Warnings, r.Warnings...),
		Aggregated:         aggregatedJSON(p),
	}
	first := true
	for _, pr := range r.Processes {
		h.Processes++
		for _, th := range pr.Threads {
			h.Threads++
			if th.Events == 0 {
				continue
			}
			if first || th.FirstNS < h.FirstNS {
				h.FirstNS = th.FirstNS
			}
			h.LastNS = max(h.LastNS, th.LastNS)
			first = false
		}
	}
	h.SpanNS = h.LastNS - h.FirstNS
	in.header = h
	in.sampling = sh
	in.sampling.Warnings = h.Warnings
	return in
}

// writeInstr writes view iv of the instrumented recording src.
func writeInstr(w io.Writer, src source, o Options, mt metric, iv instrView) error {
	if o.View == "callflow" && o.Min > 0 {
		return fmt.Errorf("report: --min does not apply to callflow, which lists every event")
	}
	in, err := analyseInstr(src, o, mt)
	if err != nil {
		return err
	}
	defer in.r.Close() // a callflow's spilled lines, read by then
	text, rep, err := iv(in)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	if s, ok := rep.(jsonStreamer); ok && o.Format == "json" {
		if err := s.streamJSON(bw); err != nil {
			return err
		}
	} else if o.Format == "json" {
		enc := json.NewEncoder(bw)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		writeInstrHeaderText(bw, &in.header)
		if err := text(bw); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func writeInstrHeaderText(w io.Writer, h *InstrHeader) {
	fmt.Fprintf(w, "Instrument: %s probes: %d events (%d calls) over %s\n", cmp.Or(h.Instrument, "unknown"), h.Events, h.Calls, formatNS(float64(h.SpanNS)))
	writeProbes(w, h.Probes)
	if h.Event == "" || h.Event == "dummy" {
		fmt.Fprintf(w, "Sampling:   none\n")
	} else {
		fmt.Fprintf(w, "Sampling:   %s: %s merged into the trees\n", eventText(h.Event, h.Freq, h.Period, h.PeriodUnit), plural(h.Total.Samples, "sample", "samples"))
	}
	if !h.StartTime.IsZero() {
		fmt.Fprintf(w, "Start:      %s\n", h.StartTime.Format(time.RFC3339))
	}
	if h.Filter != nil {
		fmt.Fprintf(w, "Filter:     %s\n", h.Filter.filter())
	}
	if h.Root != "" {
		fmt.Fprintf(w, "Root:       %s (only the calls made while it is on the stack)\n", h.Root)
	}
	t := &h.Total
	fmt.Fprintf(w, "Wall:       %s (raw %s, DELTA %s removed)\n", formatNS(t.WallNS), formatNS(float64(t.WallNSRaw)), formatNS(t.DeltaNS))
	if h.CPUMeasured {
		fmt.Fprintf(w, "CPU:        %s, %s (%d voluntary, %d involuntary)\n", formatNS(t.CPUNS), plural(t.Dispatches, "dispatch", "dispatches"), t.Voluntary, t.Involuntary)
	} else {
		fmt.Fprintf(w, "CPU:        not measured (no context switches)\n")
	}
	writeInterrupts(w, h.InterruptsMeasured, h.ExcludeInterrupts, t)
	if h.By == "goroutine" {
		fmt.Fprintf(w, "By:         goroutine (a thread's records before it ran one stay its own)\n")
	}
	writeAggregationText(w, h.Granularity, h.NoInlines)
	writeAggregatedText(w, h.Aggregated)
	switch c := h.Calibration; {
	case c != nil && c.Refused != "":
		fmt.Fprintf(w, "Calibration: %scalibration refused: %s\n", calibrationSource(c), c.Refused)
		fmt.Fprintf(w, "Times:      raw: probe cost included (nothing subtracted), profiler pauses removed\n")
	case c != nil:
		var parts []string
		for k, v := range c.Overhead {
			parts = append(parts, fmt.Sprintf("%s %s", calltree.TransitionName(k), formatNS(v)))
		}
		fmt.Fprintf(w, "Calibration: %s%s of %d (%s): %s; %s per call\n",
			calibrationSource(c), cmp.Or(c.Statistic, "?"), c.Samples, cmp.Or(c.Mechanism, "?"), strings.Join(parts, ", "), formatNS(c.PerCall))
		if len(c.Fit) > 0 {
			var fit []string
			for _, f := range c.Fit {
				fit = append(fit, fmt.Sprintf("%s %+.1f%%", f.Name, 100*f.Error()))
			}
			fmt.Fprintf(w, "Resolution: %s per call (calls shorter than that are estimates); fit: %s\n",
				formatNS(c.Resolution), strings.Join(fit, ", "))
		}
		if sc := c.Sites; sc != nil {
			// What each class of uprobe site costs a hit: the entries
			// and exits of other classes than the fitted one's lose the
			// difference too (record's cost warning used these numbers).
			callSite := ""
			if sc.ExitCallSite > 0 {
				callSite = fmt.Sprintf(", %s where a call returns", formatNS(sc.ExitCallSite))
			}
			fmt.Fprintf(w, "Sites:      per hit: entry %s emulated, %s single-stepped; exit %s return probe, %s RET probe%s\n",
				formatNS(sc.EntryEmulated), formatNS(sc.EntryStepped), formatNS(sc.ExitReturn), formatNS(sc.ExitRetInsn), callSite)
		}
		if sc := h.SwitchCost; sc != nil && sc.NS > 0 {
			fmt.Fprintf(w, "Switches:   %s of CPU a preemption (mean over %d preempted intervals), %s removed from CPU times\n",
				formatNS(sc.NS), sc.Intervals, formatNS(sc.Removed))
		}
		fmt.Fprintf(w, "Times:      calibrated (probe cost and profiler pauses removed); --raw for unadjusted\n")
	case h.Raw:
		fmt.Fprintf(w, "Calibration: not applied (--raw)\n")
		fmt.Fprintf(w, "Times:      raw: as recorded, probe cost and profiler pauses included\n")
	default:
		fmt.Fprintf(w, "Calibration: none: times are raw, probe cost included\n")
		fmt.Fprintf(w, "Times:      profiler pauses removed, probe cost included; --raw for unadjusted\n")
	}
	rp := h.Repairs
	if n := rp.Popped + rp.Unmatched + rp.Unclosed; n > 0 {
		fmt.Fprintf(w, "Repairs:    the tree is never corrupted; %s (%s, %s, %s): times around them are approximate\n",
			plural(n, "repair", "repairs"), plural(rp.Popped, "missing exit", "missing exits"),
			plural(rp.Unmatched, "unmatched exit", "unmatched exits"), plural(rp.Unclosed, "call open at the end", "calls open at the end"))
	} else {
		fmt.Fprintf(w, "Repairs:    0\n")
	}
	if rp.Detached > 0 {
		fmt.Fprintf(w, "Detach:     %s open when the probes came off: they end then\n", plural(rp.Detached, "call", "calls"))
	}
	fmt.Fprintf(w, "Dropped:    %s\n", plural(h.Dropped, "event", "events"))
	fmt.Fprintf(w, "Processes:  %d, threads %d\n", h.Processes, h.Threads)
	writeMissing(w, h.Filter != nil, h.Lost, h.Throttled, h.Paused, h.Truncated, h.TruncatedPercent, h.TruncatedBy, h.Warnings)
}

// writeInterrupts says how many interrupts the threads took and whether
// their time was left out.
func writeInterrupts(w io.Writer, measured, excluded bool, t *calltree.Metrics) {
	switch {
	case !measured:
		fmt.Fprintf(w, "Interrupts: not measured (no interrupt records)\n")
	case excluded:
		fmt.Fprintf(w, "Interrupts: %s, %s: removed from wall and CPU time\n", plural(t.Interrupts, "interrupt", "interrupts"), formatNS(float64(t.InterruptNS)))
	default:
		fmt.Fprintf(w, "Interrupts: %s, %s: included in wall and CPU time (--exclude-interrupts)\n", plural(t.Interrupts, "interrupt", "interrupts"), formatNS(float64(t.InterruptNS)))
	}
}

// plural returns "1 call" or "2 calls": n with the singular or plural
// noun.
func plural(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// instrProcessName names a process as the sampling views do: "name_pid".
func instrProcessName(pr *calltree.Process) string { return fmt.Sprintf("%s_%d", pr.Name, pr.PID) }

// sampledLabel is funcLabel with the mark of a function known only from
// samples.
func sampledLabel(f calltree.Func, sampled bool) string {
	if sampled {
		return "~" + funcLabel(f)
	}
	return funcLabel(f)
}

// sampledLegend explains the mark of sampledLabel.
const sampledLegend = "~ marks functions seen only in samples (not traced): no calls, no time."

// ProbeInfo is one probe placed, or removed, during the recording.
type ProbeInfo struct {
	Function string `json:"function"`
	Module   string `json:"module"`
	// Mechanism is "entry", "return", "ret-insn", "lazy" (--root),
	// "hook", or "removed" for a probe taken off while the target ran
	// (trueprof ctl trace remove, root).
	Mechanism string `json:"mechanism"`
	// AfterNS is when the probe was placed or removed, from the start of
	// recording.
	AfterNS uint64 `json:"after_ns"`
	// Late says the probe was placed while its process ran, so calls
	// before it were not seen: a lazy (--root) probe, one placed in a
	// library mapped later (dlopen), or in an attached process.
	Late bool `json:"late"`
}

var probeMechs = map[trace.ProbeMech]string{
	trace.ProbeHook: "hook", trace.ProbeEntry: "entry", trace.ProbeReturn: "return",
	trace.ProbeRetInsn: "ret-insn", trace.ProbeDynamic: "lazy", trace.ProbeRemoved: "removed",
	trace.ProbeCallSite: "call-site",
}

// instrument is p's probe mechanism: its header's or, for a recording
// that started by sampling only and gained uprobes while it ran (trueprof
// ctl trace add, root), "uprobe" when Probe records say so.
func instrument(p *model.Profile) string {
	if p.Header.Instrument == "" && len(p.Probes) > 0 {
		return "uprobe"
	}
	return p.Header.Instrument
}

// probeInfos describes p's probes. A probe is late when placed after its
// process began to run: a launched command's first thread starts at its
// exec, which waits for the initial probes however long placing them
// takes on a loaded machine (20-73 ms was seen), and an attached process
// ran before recording (Start 0). Lazy probes are placed after their
// caller ran, late unless placed while --root held the target (inside a
// Pause): the caller then waited at its entry for them.
func probeInfos(p *model.Profile) []ProbeInfo {
	held := func(t uint64) bool {
		for _, ps := range p.Pauses {
			if t >= ps.Time-min(ps.Duration, ps.Time) && t <= ps.Time { // Time is the pause's end
				return true
			}
		}
		return false
	}
	began := map[uint32]uint64{}
	for _, t := range p.Threads { // sorted by PID, TID, Start: the first incarnation
		if _, seen := began[t.PID]; !seen && t.TID == t.PID {
			began[t.PID] = t.Start
		}
	}
	out := []ProbeInfo{}
	for _, pr := range p.Probes {
		loc := p.Locations[pr.Function]
		info := ProbeInfo{Function: loc.Symbol(), Module: loc.Module,
			Mechanism: cmp.Or(probeMechs[pr.Mech], "unknown")}
		if pr.Time > p.Header.StartNS {
			info.AfterNS = pr.Time - p.Header.StartNS
		}
		start, known := began[pr.PID]
		if pr.Mech == trace.ProbeDynamic {
			info.Late = !held(pr.Time)
		} else {
			info.Late = known && pr.Time > start
		}
		out = append(out, info)
	}
	return out
}

// writeProbes says how many functions were probed and lists the probes
// placed late (ProbeInfo.Late), whose early calls were not seen.
func writeProbes(w io.Writer, probes []ProbeInfo) {
	if len(probes) == 0 {
		return
	}
	var late []ProbeInfo
	placed, removed, held := 0, 0, 0
	for _, pr := range probes {
		if pr.Mechanism == "removed" {
			removed++
		} else {
			placed++
		}
		if pr.Late || pr.Mechanism == "removed" {
			late = append(late, pr)
		} else if pr.Mechanism == "lazy" {
			held++
		}
	}
	if len(late) == 0 && held > 0 {
		fmt.Fprintf(w, "Probes:     %d functions, none missed a call (%d placed while --root held the target)\n", placed, held)
		return
	}
	if len(late) == 0 {
		fmt.Fprintf(w, "Probes:     %d functions, all placed before the program ran\n", placed)
		return
	}
	fmt.Fprintf(w, "Probes:     %d functions, %d placed while the program ran (calls before that were not seen)", placed, len(late)-removed)
	if removed > 0 {
		fmt.Fprintf(w, ", %d removed (calls after that were not seen)", removed)
	}
	fmt.Fprintln(w)
	const show = 20
	for i, pr := range late {
		if i == show {
			fmt.Fprintf(w, "            ... and %d more (see --format json)\n", len(late)-show)
			break
		}
		fmt.Fprintf(w, "            +%-10s %s (%s) [%s]\n", formatNS(float64(pr.AfterNS)), pr.Function, filepath.Base(pr.Module), pr.Mechanism)
	}
}

// calibrationSource says, before a calibration's statistic, that it was
// measured in the recorded run and from how many bursts; "" for a
// stored calibration.
func calibrationSource(c *trace.Calibration) string {
	if c.Source == "in-run" {
		return fmt.Sprintf("in-run (%s) ", plural(uint64(c.Bursts), "burst", "bursts"))
	}
	return ""
}

// belowResolution reports whether a traced call's calibrated self time,
// selfNS over calls, is shorter than the resolution of calibration c:
// its count is exact, its time an estimate. False without a calibration
// or resolution, and for a refused one (nothing was subtracted).
func belowResolution(c *trace.Calibration, calls uint64, selfNS float64) bool {
	return c != nil && c.Refused == "" && c.Resolution > 0 && calls > 0 && selfNS/float64(calls) < c.Resolution
}

// sampledSelfNS is the CPU time m's samples stand for, in ns: their
// periods when the sampling event counts nanoseconds (cpu-clock,
// task-clock), else 0. Sampling's estimate of a self time below the
// resolution, and the only time of a function not traced.
func sampledSelfNS(h *InstrHeader, m *calltree.Metrics) float64 {
	if m.Samples == 0 || (h.Event != "cpu-clock" && h.Event != "task-clock") {
		return 0
	}
	return float64(m.Period)
}

// resolutionLegend explains the mark of times below the resolution.
func resolutionLegend(c *trace.Calibration) string {
	return fmt.Sprintf("≈ marks calls shorter than the calibration's resolution (%s per call): exact counts, estimated times; sampled self time beside them when sampling ran (-F).",
		formatNS(c.Resolution))
}

// approx marks a formatted time that is below the resolution.
func approx(s string, below bool) string {
	if below {
		return "≈" + s
	}
	return s
}

// sampledNote is what follows the name of a function below the
// resolution: its sampled self time, when sampling ran.
func sampledNote(ns float64) string {
	if ns == 0 {
		return ""
	}
	return "  (sampled self " + formatNS(ns) + ")"
}

package report

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"trueprof/internal/calltree"
)

// InstrFlatFunction is one row of the flat view of an instrumented
// recording: a function over every analysed thread (a function accumulator).
type InstrFlatFunction struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	// Calls is the exact number of calls. Sampled marks a function known
	// only from samples (not traced): no calls, no time.
	Calls   uint64 `json:"calls"`
	Sampled bool   `json:"sampled"`
	// Self is measured while the function was the current call, Total
	// while it was anywhere on the stack (a recursive function once).
	Self  calltree.Metrics `json:"self"`
	Total calltree.Metrics `json:"total"`
	// SelfPercent and TotalPercent are shares of the total in the
	// header's metric.
	SelfPercent  float64 `json:"self_percent"`
	TotalPercent float64 `json:"total_percent"`
	// MinSelfNS and MaxSelfNS are the smallest and largest self wall
	// time of one call.
	MinSelfNS float64 `json:"min_self_ns"`
	MaxSelfNS float64 `json:"max_self_ns"`
	// MinSelfCPUNS and MaxSelfCPUNS are the same for the self CPU time
	// (zero without context switches: header's cpu_measured).
	MinSelfCPUNS float64 `json:"min_self_cpu_ns"`
	MaxSelfCPUNS float64 `json:"max_self_cpu_ns"`
	// BelowResolution marks a function whose calibrated self time per
	// call is shorter than the calibration's resolution: its calls are
	// exact, its times estimates (SampledSelfNS is then the better one).
	BelowResolution bool `json:"below_resolution,omitempty"`
	// SelfSamplesPercent and TotalSamplesPercent are Self.Samples and
	// Total.Samples as shares of the header's total samples: sampling's
	// view of every function, traced or not. Absent when zero.
	SelfSamplesPercent  float64 `json:"self_samples_percent,omitempty"`
	TotalSamplesPercent float64 `json:"total_samples_percent,omitempty"`
	// SampledSelfNS and SampledTotalNS are the CPU time those samples
	// stand for (their periods) when sampling ran with a time-based
	// event (-F: cpu-clock, task-clock); absent otherwise. For a Sampled
	// function they are its only times, and SelfPercent, TotalPercent,
	// Min and the order of rows use them under the wall and cpu metrics.
	SampledSelfNS  float64 `json:"sampled_self_ns,omitempty"`
	SampledTotalNS float64 `json:"sampled_total_ns,omitempty"`
}

// InstrFlatReport is the JSON form of the flat view of an instrumented
// recording.
type InstrFlatReport struct {
	InstrHeader
	// Functions are sorted by self, then total, in the header's metric
	// (largest first), then as calltree sorts them (self and total wall
	// time, samples, name, module).
	Functions []InstrFlatFunction `json:"functions"`
}

// instrFunctions returns the analysed functions sorted by the two values
// of key, largest first; calltree's order breaks ties.
func instrFunctions(in *instrData, key func(f *calltree.Function) []float64) []*calltree.Function {
	fs := make([]*calltree.Function, len(in.r.Functions))
	for i := range in.r.Functions {
		fs[i] = &in.r.Functions[i]
	}
	slices.SortStableFunc(fs, func(a, b *calltree.Function) int {
		ka, kb := key(a), key(b)
		return cmp.Or(cmp.Compare(kb[0], ka[0]), cmp.Compare(kb[1], ka[1]))
	})
	return fs
}

// flatValues are function f's self and total in the metric of the flat
// view: measured for a traced function and, under the wall and cpu
// metrics, the CPU time its samples stand for for one known only from
// samples, so that a hot untraced function ranks among the traced ones.
func flatValues(in *instrData, f *calltree.Function) (self, total float64) {
	if f.Calls == 0 && !in.mt.count {
		return sampledSelfNS(&in.header, &f.Self), sampledSelfNS(&in.header, &f.Total)
	}
	return in.mt.of(&f.Self), in.mt.of(&f.Total)
}

func buildInstrFlat(in *instrData) InstrFlatReport {
	rep := InstrFlatReport{InstrHeader: in.header, Functions: []InstrFlatFunction{}}
	samples := in.header.Total.Samples
	fs := instrFunctions(in, func(f *calltree.Function) []float64 {
		self, total := flatValues(in, f)
		return []float64{self, total}
	})
	for _, f := range fs {
		self, total := flatValues(in, f)
		if hiddenF(self, in.total, in.o) {
			continue
		}
		rep.Functions = append(rep.Functions, InstrFlatFunction{
			Name: f.Name, Module: f.Module, Calls: f.Calls, Sampled: f.Calls == 0,
			Self: f.Self, Total: f.Total,
			SelfPercent:  percentF(self, in.total),
			TotalPercent: percentF(total, in.total),
			MinSelfNS:    f.MinSelfNS, MaxSelfNS: f.MaxSelfNS,
			MinSelfCPUNS: f.MinSelfCPUNS, MaxSelfCPUNS: f.MaxSelfCPUNS,
			BelowResolution:     belowResolution(in.header.Calibration, f.Calls, f.Self.WallNS),
			SelfSamplesPercent:  percent(f.Self.Samples, samples),
			TotalSamplesPercent: percent(f.Total.Samples, samples),
			SampledSelfNS:       sampledSelfNS(&in.header, &f.Self),
			SampledTotalNS:      sampledSelfNS(&in.header, &f.Total),
		})
	}
	return rep
}

// mixedLegend explains the columns the flat view adds when samples were
// taken alongside the probes.
func mixedLegend(samples uint64) string {
	return fmt.Sprintf("SMP and TSMP count the samples with the function as leaf (its self) and anywhere on the stack\n"+
		"(its total); SMP%% and TSMP%% are their shares of the %s.\n"+
		"~ marks functions seen only in samples (not traced): no calls; their ~SELF and ~TOTAL are the CPU time\n"+
		"their samples stand for (-F), which the times of their traced callers include.", plural(samples, "sample", "samples"))
}

func instrFlatView(in *instrData) (func(io.Writer) error, any, error) {
	rep := buildInstrFlat(in)
	text := func(w io.Writer) error {
		mt := in.mt
		samples := rep.Total.Samples > 0
		// Per-call extremes are kept for the two times; for dispatches
		// they stay wall time, and the legend says so.
		perCall := "wall time"
		if mt.name == "cpu" {
			perCall = "CPU time"
		}
		fmt.Fprintf(w, "SELF and TOTAL are %s; MIN/CALL and MAX/CALL are the self %s of one call.\n", metricTitle(mt), perCall)
		switch {
		case samples:
			fmt.Fprintln(w, mixedLegend(rep.Total.Samples))
		case slices.ContainsFunc(rep.Functions, func(f InstrFlatFunction) bool { return f.Sampled }):
			fmt.Fprintln(w, sampledLegend)
		}
		if slices.ContainsFunc(rep.Functions, func(f InstrFlatFunction) bool { return f.BelowResolution }) {
			fmt.Fprintln(w, resolutionLegend(rep.Calibration))
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%8s %10s %7s %10s %7s %10s %10s", "CALLS", "SELF", "SELF%", "TOTAL", "TOTAL%", "MIN/CALL", "MAX/CALL")
		if samples {
			fmt.Fprintf(w, " %6s %6s %6s %6s", "SMP", "SMP%", "TSMP", "TSMP%")
		}
		fmt.Fprintf(w, "  %s\n", "FUNCTION (MODULE)")
		for _, f := range rep.Functions {
			calls, lo, hi := fmt.Sprint(f.Calls), formatNS(f.MinSelfNS), formatNS(f.MaxSelfNS)
			if mt.name == "cpu" {
				lo, hi = formatNS(f.MinSelfCPUNS), formatNS(f.MaxSelfCPUNS)
			}
			self, total := approx(mt.format(mt.of(&f.Self)), f.BelowResolution), mt.format(mt.of(&f.Total))
			note := ""
			if f.BelowResolution {
				note = sampledNote(f.SampledSelfNS)
			}
			if f.Sampled {
				calls, lo, hi = "-", "-", "-"
				self, total = sampledTime(f.SampledSelfNS, mt), sampledTime(f.SampledTotalNS, mt)
			}
			fmt.Fprintf(w, "%8s %10s %6.2f%% %10s %6.2f%% %10s %10s", calls, self, f.SelfPercent, total, f.TotalPercent, lo, hi)
			if samples {
				fmt.Fprintf(w, " %6d %5.1f%% %6d %5.1f%%", f.Self.Samples, f.SelfSamplesPercent, f.Total.Samples, f.TotalSamplesPercent)
			}
			fmt.Fprintf(w, "  %s%s\n", sampledLabel(calltree.Func{Name: f.Name, Module: f.Module}, f.Sampled), note)
		}
		return nil
	}
	return text, rep, nil
}

// sampledTime is how the flat view shows the time samples stand for in
// the SELF and TOTAL columns of an untraced function: "~" and the time,
// or "-" under the dispatches metric or without a time-based event.
func sampledTime(ns float64, mt metric) string {
	if mt.count || ns == 0 {
		return "-"
	}
	return "~" + formatNS(ns)
}

// InstrArcRow is a caller or callee row of an arcflow stanza of an
// instrumented recording (calltree.Arc).
type InstrArcRow struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	// Calls is the exact number of calls between the two functions.
	Calls uint64 `json:"calls"`
	// For a caller, Base is the part of the function's self, and Cum
	// the part of its total, measured in the calls this caller made; for
	// a callee, Cum is the part of the function's total spent in calls
	// to it and Base the callee's self within them.
	Base calltree.Metrics `json:"base"`
	Cum  calltree.Metrics `json:"cum"`
	// SharePercent is Cum as a share of the stanza function's total cum,
	// in the header's metric: for a caller, the part of the function's
	// time it is responsible for (exact arcs).
	SharePercent float64 `json:"share_percent"`
}

// InstrArcStanza is the stanza of one function: its callers, itself and
// its callees, with exact calls and times.
type InstrArcStanza struct {
	Name    string           `json:"name"`
	Module  string           `json:"module"`
	Calls   uint64           `json:"calls"`
	Sampled bool             `json:"sampled"` // known only from samples
	Base    calltree.Metrics `json:"base"`    // the function's self
	Cum     calltree.Metrics `json:"cum"`     // the function's total
	// CumPercent is Cum's share of the report's total, in the header's
	// metric.
	CumPercent float64 `json:"cum_percent"`
	// Parents (callers; <root> for a thread's outermost calls) and
	// Children (callees) are sorted by cum in the header's metric,
	// largest first, then as calltree sorts them. Never null.
	Parents  []InstrArcRow `json:"parents"`
	Children []InstrArcRow `json:"children"`
}

// InstrArcflowReport is the JSON form of the arcflow view of an
// instrumented recording.
type InstrArcflowReport struct {
	InstrHeader
	// Functions are sorted by cum, then base, in the header's metric
	// (largest first), then as calltree sorts them.
	Functions []InstrArcStanza `json:"functions"`
}

func buildInstrArcflow(in *instrData) InstrArcflowReport {
	mt := in.mt
	rep := InstrArcflowReport{InstrHeader: in.header, Functions: []InstrArcStanza{}}
	fs := instrFunctions(in, func(f *calltree.Function) []float64 { return []float64{mt.of(&f.Total), mt.of(&f.Self)} })
	for _, f := range fs {
		cum := mt.of(&f.Total)
		if hiddenF(cum, in.total, in.o) {
			continue
		}
		rows := func(arcs []calltree.Arc) []InstrArcRow {
			out := make([]InstrArcRow, 0, len(arcs))
			for _, a := range arcs {
				out = append(out, InstrArcRow{Name: a.Name, Module: a.Module, Calls: a.Calls, Base: a.Base, Cum: a.Cum,
					SharePercent: percentF(mt.of(&a.Cum), cum)})
			}
			slices.SortStableFunc(out, func(a, b InstrArcRow) int { return cmp.Compare(mt.of(&b.Cum), mt.of(&a.Cum)) })
			return out
		}
		rep.Functions = append(rep.Functions, InstrArcStanza{
			Name: f.Name, Module: f.Module, Calls: f.Calls, Sampled: f.Calls == 0,
			Base: f.Self, Cum: f.Total, CumPercent: percentF(cum, in.total),
			Parents: rows(f.Callers), Children: rows(f.Callees),
		})
	}
	return rep
}

func instrArcflowView(in *instrData) (func(io.Writer) error, any, error) {
	rep := buildInstrArcflow(in)
	text := func(w io.Writer) error {
		mt := in.mt
		fmt.Fprintln(w, "Each stanza: the function's parents (callers), the function itself")
		fmt.Fprintln(w, "(not indented, with its CUM%), then its children (callees).")
		fmt.Fprintf(w, "BASE and CUM are %s. SHARE is the part of the function's CUM\n", metricTitle(mt))
		fmt.Fprintln(w, "that a caller's calls account for, or that was spent in a callee.")
		if slices.ContainsFunc(rep.Functions, func(s InstrArcStanza) bool { return s.Sampled }) {
			fmt.Fprintln(w, sampledLegend)
		}
		sep := strings.Repeat("-", 70)
		row := func(calls uint64, sampled bool, base, cum calltree.Metrics, pct, share, name string) {
			c := fmt.Sprint(calls)
			if sampled {
				c = "-"
			}
			fmt.Fprintf(w, "%8s %10s %10s %7s %7s  %s\n", c, mt.format(mt.of(&base)), mt.format(mt.of(&cum)), pct, share, name)
		}
		for _, s := range rep.Functions {
			fmt.Fprintln(w, sep)
			fmt.Fprintf(w, "%8s %10s %10s %7s %7s  %s\n", "CALLS", "BASE", "CUM", "CUM%", "SHARE", "NAME")
			for _, p := range s.Parents {
				row(p.Calls, s.Sampled, p.Base, p.Cum, "", fmt.Sprintf("%.2f%%", p.SharePercent), "    "+funcLabel(calltree.Func{Name: p.Name, Module: p.Module}))
			}
			row(s.Calls, s.Sampled, s.Base, s.Cum, fmt.Sprintf("%.2f%%", s.CumPercent), "", sampledLabel(calltree.Func{Name: s.Name, Module: s.Module}, s.Sampled))
			for _, c := range s.Children {
				row(c.Calls, c.Calls == 0, c.Base, c.Cum, "", fmt.Sprintf("%.2f%%", c.SharePercent), "    "+sampledLabel(calltree.Func{Name: c.Name, Module: c.Module}, c.Calls == 0))
			}
		}
		if len(rep.Functions) > 0 {
			fmt.Fprintln(w, sep)
		}
		return nil
	}
	return text, rep, nil
}

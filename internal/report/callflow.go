package report

import (
	"fmt"
	"io"
	"strings"

	"trueprof/internal/calltree"
)

// CallflowEvent is one line of the callflow view: an entry or exit
// (calltree.FlowEvent, whose delta is the interval since the thread's
// previous event) and its time since BaseNS.
type CallflowEvent struct {
	OffsetNS uint64 `json:"offset_ns"`
	calltree.FlowEvent
}

// CallflowThread is the callflow of one thread incarnation or, by
// goroutine, goroutine.
type CallflowThread struct {
	PID       uint32          `json:"pid"`
	TID       uint32          `json:"tid"`                 // 0 for a goroutine
	Start     uint64          `json:"start_ns"`            // creation time; 0 if before recording
	Name      string          `json:"name"`                // "name_tid", or "goroutine N"
	Goroutine *uint64         `json:"goroutine,omitempty"` // absent for a thread
	Events    []CallflowEvent `json:"events"`              // in time order; never null
}

// CallflowReport is the JSON form of the callflow view (the
// log-gen report): every entry and exit of every analysed thread.
type CallflowReport struct {
	InstrHeader
	// BaseNS is the time the offsets count from (trace clock): the
	// recording's start when the header has it, else the first event
	// shown.
	BaseNS  uint64           `json:"base_ns"`
	Threads []CallflowThread `json:"threads"` // by pid, goroutine, tid and start; never null
}

// buildCallflow makes the callflow view of in, whose analysis kept the
// callflows (Options.Flow).
func buildCallflow(in *instrData) CallflowReport {
	flows := in.r.Flows
	rep := CallflowReport{InstrHeader: in.header, Threads: []CallflowThread{}}
	first, seen := uint64(0), false
	for _, ft := range flows {
		for _, e := range ft.Events {
			if !seen || e.TimeNS < first {
				first, seen = e.TimeNS, true
			}
		}
	}
	rep.BaseNS = first
	if s := in.p.Header.StartNS; s != 0 && s <= first {
		rep.BaseNS = s
	}
	for _, ft := range flows {
		ct := CallflowThread{PID: ft.PID, TID: ft.TID, Start: ft.Start, Name: fmt.Sprintf("%s_%d", ft.Name, ft.TID),
			Goroutine: ft.Goroutine, Events: make([]CallflowEvent, len(ft.Events))}
		if ft.Goroutine != nil {
			ct.Name = ft.Name
		}
		for i, e := range ft.Events {
			ct.Events[i] = CallflowEvent{OffsetNS: e.TimeNS - min(e.TimeNS, rep.BaseNS), FlowEvent: e}
		}
		rep.Threads = append(rep.Threads, ct)
	}
	return rep
}

// flowNotes say what a repaired line is.
var flowNotes = map[calltree.FlowKind]string{
	calltree.FlowPopped:    "  [exit missing: closed by a caller's exit]",
	calltree.FlowUnmatched: "  [unmatched exit: ignored]",
	calltree.FlowUnclosed:  "  [no exit: still open at the end]",
	calltree.FlowDetach:    "  [detach: the probes came off]",
	calltree.FlowDetached:  "  [no exit: open when the probes came off]",
	calltree.FlowEnd:       "  [end: its exit, its last run, or the end of the recording]",
}

func callflowView(in *instrData) (func(io.Writer), any, error) {
	rep := buildCallflow(in)
	text := func(w io.Writer) {
		h := &rep.InstrHeader
		samples := h.Total.Samples > 0
		since := "the recording's start"
		if rep.BaseNS != in.p.Header.StartNS || rep.BaseNS == 0 {
			since = "the first event"
		}
		fmt.Fprintf(w, "TIME is since %s; WALL (calibrated), RAW, CPU, DS (dispatches) and IN\n", since)
		fmt.Fprintln(w, "(interrupts) are what the interval since the thread's previous event (for the")
		fmt.Fprintln(w, "first, since the thread began) measured. > entry, < exit, = the thread's end.")
		for _, th := range rep.Threads {
			if th.Goroutine != nil {
				fmt.Fprintf(w, "\nGoroutine %d (pid %d): %d lines\n\n", *th.Goroutine, th.PID, len(th.Events))
			} else {
				fmt.Fprintf(w, "\nThread %s (pid %d, tid %d): %d lines\n\n", th.Name, th.PID, th.TID, len(th.Events))
			}
			fmt.Fprintf(w, "%12s %10s %10s %10s %6s %6s", "TIME", "WALL", "RAW", "CPU", "DS", "IN")
			if samples {
				fmt.Fprintf(w, " %6s", "SMP")
			}
			fmt.Fprintf(w, "  %s\n", "EVENT")
			for _, e := range th.Events {
				d := &e.Delta
				cpu, ds, in := formatNS(d.CPUNS), fmt.Sprint(d.Dispatches), fmt.Sprint(d.Interrupts)
				if !h.CPUMeasured {
					cpu, ds = "-", "-"
				}
				if !h.InterruptsMeasured {
					in = "-"
				}
				fmt.Fprintf(w, "%12s %10s %10s %10s %6s %6s", formatNS(float64(e.OffsetNS)), formatNS(d.WallNS), formatNS(float64(d.WallNSRaw)), cpu, ds, in)
				if samples {
					fmt.Fprintf(w, " %6d", d.Samples)
				}
				mark, indent := "<", strings.Repeat("  ", max(0, e.Level-1))
				switch e.Kind {
				case calltree.FlowEntry:
					mark = ">"
				case calltree.FlowEnd, calltree.FlowDetach:
					mark, indent = "=", strings.Repeat("  ", e.Level)
				}
				fmt.Fprintf(w, "  %s%s %s%s\n", indent, mark, funcLabel(calltree.Func{Name: e.Name, Module: e.Module}), flowNotes[e.Kind])
			}
		}
	}
	return text, rep, nil
}

package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

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

// callflowStream is the callflow view: its JSON is CallflowReport's,
// written a line at a time (streamJSON), since a long recording's
// callflow does not fit in memory; its text likewise.
type callflowStream struct {
	rep   CallflowReport // each thread without its events
	flows []calltree.FlowThread
}

// buildCallflow makes the callflow view of in, whose analysis kept the
// callflows (Options.Flow).
func buildCallflow(in *instrData) *callflowStream {
	flows := in.r.Flows
	rep := CallflowReport{InstrHeader: in.header, Threads: []CallflowThread{}}
	first, seen := uint64(0), false
	for _, ft := range flows {
		if !seen || ft.FirstNS < first {
			first, seen = ft.FirstNS, true
		}
	}
	rep.BaseNS = first
	if s := in.p.Header.StartNS; s != 0 && s <= first {
		rep.BaseNS = s
	}
	for _, ft := range flows {
		ct := CallflowThread{PID: ft.PID, TID: ft.TID, Start: ft.Start, Name: fmt.Sprintf("%s_%d", ft.Name, ft.TID),
			Goroutine: ft.Goroutine, Events: []CallflowEvent{}}
		if ft.Goroutine != nil {
			ct.Name = ft.Name
		}
		rep.Threads = append(rep.Threads, ct)
	}
	return &callflowStream{rep: rep, flows: flows}
}

// each calls fn with each line of thread i.
func (c *callflowStream) each(i int, fn func(e *CallflowEvent) error) error {
	var ce CallflowEvent
	return c.flows[i].Each(func(e *calltree.FlowEvent) error {
		ce = CallflowEvent{OffsetNS: e.TimeNS - min(e.TimeNS, c.rep.BaseNS), FlowEvent: *e}
		return fn(&ce)
	})
}

// streamJSON writes what json.Encoder, indented by two spaces, writes for
// the CallflowReport with every thread's events: each thread and each
// event is marshalled on its own, at its depth, into the array the
// report's encoding leaves empty. Only its last write's error is
// returned: w is a bufio.Writer, whose errors stick.
func (c *callflowStream) streamJSON(w io.Writer) error {
	top := c.rep
	top.Threads = []CallflowThread{}
	head, err := json.MarshalIndent(&top, "", "  ")
	if err != nil {
		return err
	}
	if len(c.rep.Threads) == 0 {
		_, err := fmt.Fprintf(w, "%s\n", head)
		return err
	}
	head, ok := bytes.CutSuffix(head, []byte("[]\n}"))
	if !ok {
		return fmt.Errorf("report: the callflow's threads are not the last field of its JSON")
	}
	w.Write(head)
	io.WriteString(w, "[\n    ")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("        ", "  ")
	for i := range c.rep.Threads {
		if i > 0 {
			io.WriteString(w, ",\n    ")
		}
		th, err := json.MarshalIndent(&c.rep.Threads[i], "    ", "  ")
		if err != nil {
			return err
		}
		th, ok := bytes.CutSuffix(th, []byte("[]\n    }"))
		if !ok {
			return fmt.Errorf("report: a callflow thread's events are not the last field of its JSON")
		}
		w.Write(th)
		io.WriteString(w, "[\n        ")
		n := 0
		err = c.each(i, func(e *CallflowEvent) error {
			if n++; n > 1 {
				io.WriteString(w, ",\n        ")
			}
			buf.Reset()
			if err := enc.Encode(e); err != nil {
				return err
			}
			_, err := w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
			return err
		})
		if err != nil {
			return err
		}
		io.WriteString(w, "\n      ]\n    }")
	}
	_, err = io.WriteString(w, "\n  ]\n}\n")
	return err
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

func callflowView(in *instrData) (func(io.Writer) error, any, error) {
	c := buildCallflow(in)
	rep := &c.rep
	text := func(w io.Writer) error {
		h := &rep.InstrHeader
		samples := h.Total.Samples > 0
		since := "the recording's start"
		if rep.BaseNS != in.p.Header.StartNS || rep.BaseNS == 0 {
			since = "the first event"
		}
		fmt.Fprintf(w, "TIME is since %s; WALL (calibrated), RAW, CPU, DS (dispatches) and IN\n", since)
		fmt.Fprintln(w, "(interrupts) are what the interval since the thread's previous event (for the")
		fmt.Fprintln(w, "first, since the thread began) measured. > entry, < exit, = the thread's end.")
		var line []byte
		labels := map[calltree.Func]string{}
		for i, th := range rep.Threads {
			if th.Goroutine != nil {
				fmt.Fprintf(w, "\nGoroutine %d (pid %d): %d lines\n\n", *th.Goroutine, th.PID, c.flows[i].Lines)
			} else {
				fmt.Fprintf(w, "\nThread %s (pid %d, tid %d): %d lines\n\n", th.Name, th.PID, th.TID, c.flows[i].Lines)
			}
			fmt.Fprintf(w, "%12s %10s %10s %10s %6s %6s", "TIME", "WALL", "RAW", "CPU", "DS", "IN")
			if samples {
				fmt.Fprintf(w, " %6s", "SMP")
			}
			fmt.Fprintf(w, "  %s\n", "EVENT")
			err := c.each(i, func(e *CallflowEvent) error {
				line = callflowLine(line[:0], e, h, samples, labels)
				_, err := w.Write(line)
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	return text, c, nil
}

// callflowLine appends the text line of e, its columns as
// "%12s %10s %10s %10s %6s %6s[ %6d]  %s%s %s%s\n" would print them, put
// together without fmt: a callflow has a line per event. labels caches
// the functions' labels.
func callflowLine(b []byte, e *CallflowEvent, h *InstrHeader, samples bool, labels map[calltree.Func]string) []byte {
	d := &e.Delta
	b = padTo(b, 12, appendNS(b, float64(e.OffsetNS)))
	b = padTo(b, 11, appendNS(append(b, ' '), d.WallNS))
	b = padTo(b, 11, appendNS(append(b, ' '), float64(d.WallNSRaw)))
	if h.CPUMeasured {
		b = padTo(b, 11, appendNS(append(b, ' '), d.CPUNS))
		b = padTo(b, 7, strconv.AppendUint(append(b, ' '), d.Dispatches, 10))
	} else {
		b = padTo(b, 11, append(b, " -"...))
		b = padTo(b, 7, append(b, " -"...))
	}
	if h.InterruptsMeasured {
		b = padTo(b, 7, strconv.AppendUint(append(b, ' '), d.Interrupts, 10))
	} else {
		b = padTo(b, 7, append(b, " -"...))
	}
	if samples {
		b = padTo(b, 7, strconv.AppendUint(append(b, ' '), d.Samples, 10))
	}
	b = append(b, "  "...)
	indent, mark := max(0, e.Level-1), byte('<')
	switch e.Kind {
	case calltree.FlowEntry:
		mark = '>'
	case calltree.FlowEnd, calltree.FlowDetach:
		indent, mark = e.Level, '='
	}
	for range indent {
		b = append(b, "  "...)
	}
	f := calltree.Func{Name: e.Name, Module: e.Module}
	label, ok := labels[f]
	if !ok {
		label = funcLabel(f)
		labels[f] = label
	}
	b = append(append(append(b, mark, ' '), label...), flowNotes[e.Kind]...)
	return append(b, '\n')
}

// padTo right-aligns the field appended to b, in width columns (runes,
// as fmt's %*s counts them): to is b with the field after len(b).
func padTo(b []byte, width int, to []byte) []byte {
	n := utf8.RuneCount(to[len(b):])
	if n >= width {
		return to
	}
	pad := width - n
	to = append(to, "            "[:pad]...) // width is at most 12
	copy(to[len(b)+pad:], to[len(b):len(to)-pad])
	for i := len(b); i < len(b)+pad; i++ {
		to[i] = ' '
	}
	return to
}

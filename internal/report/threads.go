package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// ThreadRow is one row of the threads view: a thread incarnation (a
// reused tid is another row) or, by goroutine, a goroutine, with what its
// whole life in the recording measured. Its metrics are its tree's root
// cum (calltree.Metrics, whose keys it has: wall_ns, cpu_ns, dispatches,
// dispatches_voluntary, dispatches_involuntary, interrupts, interrupt_ns,
// samples...), so the rows add up to the trees.
type ThreadRow struct {
	PID uint32 `json:"pid"`
	TID uint32 `json:"tid"` // 0 for a goroutine
	// Goroutine is the goroutine's id and OSThreads the tids of the
	// threads it ran on; absent for a thread.
	Goroutine *uint64  `json:"goroutine,omitempty"`
	OSThreads []uint32 `json:"os_threads,omitempty"`
	// Labels are the runtime/pprof labels the goroutine carried
	// (calltree.Thread.Labels); absent for a thread or without labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Name is the last name, Names every name in order ("goroutine N"
	// for a goroutine). Never null.
	Name  string   `json:"name"`
	Names []string `json:"names"`
	// StartNS and EndNS are a thread's creation and exit (trace clock),
	// 0 when it existed before recording or still ran at its end; a
	// goroutine's first and last time on a thread.
	StartNS uint64 `json:"start_ns"`
	EndNS   uint64 `json:"end_ns"`
	calltree.Metrics
	Events uint64 `json:"events"` // function entries and exits
	// Migrations and PageFaults are the kernel's per-thread counters,
	// null when the recording has none for the thread (and by goroutine,
	// whose rows are not whole threads).
	Migrations *uint64 `json:"migrations"`
	PageFaults *uint64 `json:"page_faults"`
	// Percent is the row's share of the total, in the metric.
	Percent float64 `json:"percent"`
	// LostSwitches counts the row's context switches whose record the
	// kernel lost (calltree.Repairs.Switches): its CPU time is bounded,
	// not measured. Absent when zero.
	LostSwitches uint64 `json:"lost_switches,omitempty"`
}

// ThreadsReport is the JSON form of the threads view of a sampling
// recording.
type ThreadsReport struct {
	Header
	// CPUMeasured and InterruptsMeasured tell whether the recording has
	// context switches and interrupts: without them cpu_ns and
	// dispatches, interrupts and interrupt_ns are zero, not measured.
	CPUMeasured        bool `json:"cpu_measured"`
	InterruptsMeasured bool `json:"interrupts_measured"`
	ExcludeInterrupts  bool `json:"exclude_interrupts"`
	// Threads takes the place of the header's count: one row per thread
	// incarnation (goroutine), by pid, then goroutine, tid and start.
	Threads []ThreadRow `json:"threads"`
	// Totals adds up every row, hidden ones (Min) included.
	Totals ThreadRow `json:"totals"`
}

// InstrThreadsReport is the JSON form of the threads view of an
// instrumented recording: times calibrated unless Raw.
type InstrThreadsReport struct {
	InstrHeader
	Threads []ThreadRow `json:"threads"` // as in ThreadsReport
	Totals  ThreadRow   `json:"totals"`
}

// threadRows makes a row of each analysed thread, and their totals.
func threadRows(in *instrData) (rows []ThreadRow, totals ThreadRow) {
	rows = []ThreadRow{}
	totals = ThreadRow{Name: "TOTAL", Names: []string{}}
	for _, pr := range in.r.Processes {
		for i := range pr.Threads {
			th := &pr.Threads[i]
			row := ThreadRow{PID: th.PID, TID: th.TID, Goroutine: th.Goroutine, OSThreads: th.OSThreads, Labels: th.Labels,
				Name: th.Name, Names: []string{th.Name}, StartNS: th.BeginNS, EndNS: th.EndNS,
				Metrics: th.Root.Cum, Events: th.Events, Percent: percentF(in.mt.of(&th.Root.Cum), in.total),
				LostSwitches: th.Repairs.Switches}
			if th.Goroutine == nil {
				row.StartNS, row.EndNS = th.Start, 0
				if mt := in.p.ThreadAt(th.PID, th.TID, th.Start); mt != nil {
					row.EndNS = mt.End
					if len(mt.Names) > 0 {
						row.Names = mt.Names
					}
					if !in.opts.ByGoroutine { // the row is not the whole thread's then
						row.Migrations = counter(mt, trace.CounterMigrations)
						row.PageFaults = counter(mt, trace.CounterPageFaults)
					}
				}
			}
			totals.Metrics.Add(row.Metrics)
			totals.Events += row.Events
			totals.LostSwitches += row.LostSwitches
			totals.Migrations = addCounter(totals.Migrations, row.Migrations)
			totals.PageFaults = addCounter(totals.PageFaults, row.PageFaults)
			if !hiddenF(in.mt.of(&row.Metrics), in.total, in.o) {
				rows = append(rows, row)
			}
		}
	}
	totals.Percent = percentF(in.mt.of(&totals.Metrics), in.total)
	return rows, totals
}

// counter returns the thread's total of counter k, nil if not recorded.
func counter(mt *model.Thread, k trace.CounterKind) *uint64 {
	if v, ok := mt.Counters[k]; ok {
		return &v
	}
	return nil
}

// addCounter adds a counter that may not have been recorded to a sum.
func addCounter(sum, v *uint64) *uint64 {
	if v == nil {
		return sum
	}
	if sum == nil {
		return new(*v)
	}
	return new(*sum + *v)
}

// writeThreads writes the threads view: for a sampling recording under
// its header, for an instrumented one under the instrumented views'.
func writeThreads(w io.Writer, src source, o Options, mt metric) error {
	in, err := analyseInstr(src, o, mt)
	if err != nil {
		return err
	}
	rows, totals := threadRows(in)
	h := &in.header
	bw := bufio.NewWriter(w)
	if o.Format == "json" {
		var rep any = InstrThreadsReport{InstrHeader: *h, Threads: rows, Totals: totals}
		if !src.p.HasCalls() {
			rep = ThreadsReport{Header: in.sampling, CPUMeasured: h.CPUMeasured, InterruptsMeasured: h.InterruptsMeasured,
				ExcludeInterrupts: h.ExcludeInterrupts, Threads: rows, Totals: totals}
		}
		enc := json.NewEncoder(bw)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
		return bw.Flush()
	}
	if !src.p.HasCalls() {
		writeHeaderText(bw, in.sampling)
		fmt.Fprintf(bw, "Wall:       %s\n", formatNS(totals.WallNS))
		if h.CPUMeasured {
			fmt.Fprintf(bw, "CPU:        %s, %s (%d voluntary, %d involuntary)\n", formatNS(totals.CPUNS),
				plural(totals.Dispatches, "dispatch", "dispatches"), totals.Voluntary, totals.Involuntary)
		} else {
			fmt.Fprintf(bw, "CPU:        not measured (no context switches)\n")
		}
		writeInterrupts(bw, h.InterruptsMeasured, h.ExcludeInterrupts, &totals.Metrics)
		fmt.Fprintln(bw)
	} else {
		writeInstrHeaderText(bw, h)
	}
	threadsText(bw, src, h, mt, rows, totals)
	return bw.Flush()
}

// threadsText writes the table of the threads view.
func threadsText(w io.Writer, src source, h *InstrHeader, mt metric, rows []ThreadRow, totals ThreadRow) {
	p := src.p
	times := "as recorded"
	if h.Calibrated && src.p.HasCalls() {
		times = "calibrated (probe cost and profiler pauses removed)"
	}
	fmt.Fprintf(w, "Each thread's life in the recording: WALL and CPU %s; %% is of the total %s.\n", times, metricTitle(mt))
	fmt.Fprintln(w, "DS counts dispatches: VOL blocked, INV preempted; MIG migrations, PF page faults; IN interrupts, IN-TIME theirs.")
	fmt.Fprintln(w, "START and END are since the start of recording: - before it, or still running at its end. - is not measured.")
	if n := totals.LostSwitches; n > 0 && h.CPUMeasured {
		fmt.Fprintf(w, "CPU marked ~ is bounded, not measured: the kernel lost %s of these threads (a thread left its CPU by the next switch-in of another there).\n",
			plural(n, "context switch", "context switches"))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%7s %7s %10s %10s %10s %10s %7s %6s %6s %6s %5s %6s %6s %10s %6s %8s  %s\n",
		"PID", "TID", "START", "END", "WALL", "CPU", "%", "DS", "VOL", "INV", "MIG", "PF", "IN", "IN-TIME", "SMP", "EVENTS", "NAME")
	since := func(t uint64) string {
		if t == 0 {
			return "-"
		}
		return formatNS(float64(t - min(t, p.Header.StartNS)))
	}
	count := func(v uint64, measured bool) string {
		if !measured {
			return "-"
		}
		return fmt.Sprint(v)
	}
	counter := func(v *uint64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	line := func(pid, tid, start, end string, r *ThreadRow, name string) {
		cpu := "-"
		if h.CPUMeasured {
			cpu = formatNS(r.CPUNS)
			if r.LostSwitches > 0 {
				cpu = "~" + cpu
			}
		}
		inTime := "-"
		if h.InterruptsMeasured {
			inTime = formatNS(float64(r.InterruptNS))
		}
		fmt.Fprintf(w, "%7s %7s %10s %10s %10s %10s %6.2f%% %6s %6s %6s %5s %6s %6s %10s %6d %8d  %s\n",
			pid, tid, start, end, formatNS(r.WallNS), cpu, r.Percent,
			count(r.Dispatches, h.CPUMeasured), count(r.Voluntary, h.CPUMeasured), count(r.Involuntary, h.CPUMeasured),
			counter(r.Migrations), counter(r.PageFaults), count(r.Interrupts, h.InterruptsMeasured), inTime,
			r.Samples, r.Events, name)
	}
	for i := range rows {
		r := &rows[i]
		tid, name := fmt.Sprint(r.TID), strings.Join(r.Names, " → ")
		switch {
		case r.Goroutine != nil:
			tids := make([]string, len(r.OSThreads))
			for i, t := range r.OSThreads {
				tids[i] = fmt.Sprint(t)
			}
			tid, name = "-", fmt.Sprintf("%s (on threads %s)", r.Name, strings.Join(tids, ", "))
		case h.By == "goroutine":
			name += " (before its goroutines)"
		}
		line(fmt.Sprint(r.PID), tid, since(r.StartNS), since(r.EndNS), r, name)
	}
	line("TOTAL", "", "", "", &totals, plural(uint64(len(rows)), "row", "rows"))
}

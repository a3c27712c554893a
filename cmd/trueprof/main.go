// Command trueprof is a profiler for Linux programs: it records samples
// with full call stacks from launched or running processes into one trace
// file and turns it into reports and exports.
//
//	trueprof demo
//	trueprof record -o trueprof.trace -- ./prog args
//	trueprof report -i trueprof.trace --view flat
//	trueprof export -i trueprof.trace --format pprof -o prof.pb.gz
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"trueprof/internal/calibrate"
	"trueprof/internal/demo"
	"trueprof/internal/export"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/record"
	"trueprof/internal/report"
	"trueprof/internal/trace"
	"trueprof/internal/web"
)

// exitError carries the launched target's exit status out of `record`.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("target exited with status %d", int(e)) }

func main() {
	record.RunWrapper()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := rootCmd().ExecuteContext(ctx)
	var code exitError
	switch {
	case errors.As(err, &code):
		os.Exit(int(code))
	case err != nil:
		fmt.Fprintln(os.Stderr, "trueprof:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "trueprof",
		Short:         "A profiler for Linux programs: sampling with full call stacks, one trace file, many reports",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(recordCmd(), reportCmd(), exportCmd(), calibrateCmd(), demoCmd(), serveCmd(), ctlCmd())
	return root
}

func recordCmd() *cobra.Command {
	var (
		out, event, mode, size string
		mmapPages, callGraph   string
		freq, period           uint64
		pid                    int
		duration               time.Duration
		patterns               []string
		mech, root             string
		noGoroutines           bool
		noCalibrate, stored    bool
		aggregate              bool
		snapshot               time.Duration
		treeMemory             string
	)
	c := &cobra.Command{
		Use:   "record [flags] -- CMD ARGS... | record -p PID [-d DURATION]",
		Short: "Record samples of a launched command or a running process into a trace file",
		Long: `Record samples with full call stacks (frame pointers, user and kernel) into a trace file.

A launched command is sampled from its exec onwards, with every thread and
child process it creates; record returns the command's exit status. With -p,
trueprof attaches to a running process (all its threads, and threads created
later) until it exits, -d passes, or Ctrl-C.

Modes: normal stops sampling at --size; wrap keeps the most recent --size of
samples (and always all module and thread records); continuous has no limit.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ev, err := perf.ParseEvent(event)
			if err != nil {
				return err
			}
			limit, err := parseSize(size)
			if err != nil {
				return err
			}
			pages, err := parseMmapPages(mmapPages)
			if err != nil {
				return err
			}
			graph, stackSize, err := record.ParseCallGraph(callGraph)
			if err != nil {
				return err
			}
			cfg := record.Config{
				Output: out, Event: ev, Freq: freq, Period: period, Mode: trace.Mode(mode), SizeLimit: limit,
				Command: args, PID: pid, Duration: duration, Log: cmd.ErrOrStderr(),
				Trace: patterns, Mech: record.Mech(mech), Root: root, NoGoroutines: noGoroutines, RingPages: pages,
				CallGraph: graph, StackBytes: stackSize,
				Aggregate: aggregate, Snapshot: snapshot,
				// Probes alone unless sampling was asked for too.
				ProbesAlone: !cmd.Flags().Changed("freq") && !cmd.Flags().Changed("count") && !cmd.Flags().Changed("event"),
			}
			if treeMemory != "" {
				if cfg.TreeMemory, err = parseSize(treeMemory); err != nil {
					return fmt.Errorf("--tree-memory: %w", err)
				}
			}
			if !noCalibrate {
				// Hooks and uprobes calibrate in the run unless told
				// to use the stored calibration.
				cfg.CalibrateInRun = !stored
				cfg.UprobeCalibration = calibrate.NewUprobeInRun()
				cfg.Calibration = func(m record.Mech) (*trace.Calibration, error) { return calibration(cmd, string(m)) }
			}
			res, err := record.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "trueprof: %d samples (%s), %d events, %d lost%s; written to %s (%s); stopped: %s; recorder CPU %.2f s\n",
				res.Samples, completeness(res), res.Events, res.Lost, discarded(res), out, formatBytes(res.Bytes), res.Reason, res.RecorderCPU.Seconds())
			if res.ExitCode != 0 {
				return exitError(res.ExitCode)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVarP(&out, "output", "o", "trueprof.trace", "trace file to write")
	f.Uint64VarP(&freq, "freq", "F", 999, "samples per second")
	f.Uint64VarP(&period, "count", "c", 0, "sample every N events instead of a frequency")
	f.StringVarP(&event, "event", "e", "cpu-clock", "event to sample (cpu-clock, task-clock, page-faults, context-switches, cycles, ...)")
	f.StringVar(&mode, "mode", "normal", "normal | wrap | continuous")
	f.StringVar(&size, "size", "256M", "size limit for normal and wrap modes (K, M, G suffixes)")
	f.IntVarP(&pid, "pid", "p", 0, "attach to a running process")
	f.DurationVarP(&duration, "duration", "d", 0, "stop after this long (e.g. 10s)")
	f.StringArrayVar(&patterns, "trace", nil, "instrument functions matching this glob (\"name\" or \"module:name\"; repeatable)")
	f.StringVar(&mech, "mech", "", "probe mechanism: hook (-finstrument-functions builds) or uprobe; default: hook when compiled in")
	f.StringVar(&root, "root", "", "instrument this function and, lazily, what it calls")
	f.BoolVar(&noCalibrate, "no-calibrate", false, "instrumented recordings: no calibration (reports show raw times, probe cost included)")
	f.BoolVar(&stored, "stored-calibration", false, "instrumented recordings: use this machine's stored calibration (trueprof calibrate) instead of calibrating in the run")
	c.MarkFlagsMutuallyExclusive("no-calibrate", "stored-calibration")
	f.BoolVar(&aggregate, "aggregate", false, "fold the events into call trees while recording and write their snapshots instead of every event: hours of tracing in megabytes (callflow and timeline then have no events to show)")
	f.DurationVar(&snapshot, "snapshot", 0, "with --aggregate: the interval between tree snapshots; a killed recorder loses at most one (default 1s)")
	f.StringVar(&treeMemory, "tree-memory", "", "with --aggregate: bound the trees' memory (K, M, G suffixes); past it the smallest subtrees are folded into (pruned) nodes, every total exact")
	f.BoolVar(&noGoroutines, "no-goroutines", false, "Go targets: do not record goroutine switches (about 1 µs each)")
	f.StringVar(&callGraph, "call-graph", "auto", "how user stacks are unwound: auto (CFI, frame pointers where code has no CFI), dwarf (CFI only), fp (frame pointers); dwarf,SIZE and auto,SIZE set the stack bytes copied per sample (default 65528, the kernel's largest; 8192 without CAP_PERFMON or CAP_IPC_LOCK)")
	f.StringVarP(&mmapPages, "mmap-pages", "m", "", "ring size per CPU, as perf -m: data pages, or a size with a B, K, M or G suffix; rounded up to a power of two pages (default: sized to the sampling rate)")
	return c
}

// completeness says which share of the samples have stacks that reach
// their thread's entry, and why the others stop short.
func completeness(res *record.Result) string {
	var short uint64
	for _, n := range res.Truncated {
		short += n
	}
	if res.Samples == 0 {
		return "no stacks"
	}
	msg := fmt.Sprintf("%.1f%% with complete stacks", 100*float64(res.Samples-min(short, res.Samples))/float64(res.Samples))
	for r, n := range trace.Truncations(&res.Truncated) {
		msg += fmt.Sprintf(", %d %s", n, r)
	}
	return msg
}

// discarded says how many samples and events wrap mode dropped to stay
// within --size: the counts before it include them, and the report's
// header shows them as lost (wrap).
func discarded(res *record.Result) string {
	if res.Discarded == 0 {
		return ""
	}
	return fmt.Sprintf(", %d discarded by --mode wrap (the oldest, to stay within --size)", res.Discarded)
}

// parseMmapPages parses -m as perf does: a number of pages, or a size
// with a unit, rounded up to a power of two pages. "" is 0: the
// recorder sizes its rings itself.
func parseMmapPages(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	var bytes int64
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 || n > 1<<30 {
			return 0, fmt.Errorf("--mmap-pages %q: want 1 to 2^30 pages", s)
		}
		bytes = n * int64(os.Getpagesize())
	} else if bytes, err = parseSize(s); err != nil || bytes <= 0 || bytes > 1<<42 {
		return 0, fmt.Errorf("--mmap-pages %q: want a number of pages or a size such as 512K or 2M", s)
	}
	return perf.RingPagesFor(bytes), nil
}

// calibration returns this machine's stored calibration of mech,
// measuring it first when missing: an instrumented profile is only as
// good as its calibration.
func calibration(cmd *cobra.Command, mech string) (*trace.Calibration, error) {
	return calibrate.LoadOrMeasure(cmd.Context(), calibrate.Options{Mechanism: mech}, cmd.ErrOrStderr())
}

func calibrateCmd() *cobra.Command {
	var mechs []string
	var batches int
	var counters bool
	c := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure the probe mechanisms' own cost on this machine, for calibrated reports",
		Long: `Measure what each probe mechanism costs on this machine.

calibrate runs a bundled target whose loops call functions in several
shapes (leaf-heavy, call-heavy, mixed, long; leaf bodies of 0.1 to 10 us), without
probes and recorded under each mechanism, alternately in batches. It fits
the overhead of each transition kind (entry->entry, entry->exit, exit->entry,
exit->exit) so that the calibrated loops match the uninstrumented ones, and
stores each shape's residual and the resolution (the shortest body from
which every longer shape is measured within 10%) with it. A calibration that fits badly is refused,
not stored. The result is stored per machine (see docs/calibration.md) and
copied into traces recorded with --stored-calibration (record measures it
on first use); recordings otherwise calibrate in the run itself.
--counters checks whether per-call hardware counters can be measured here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if counters {
				// Per-call hardware counters: only a capability check
				// until a PMU is there to calibrate them on.
				if err := calibrate.CounterSupport(); err != nil {
					fmt.Fprintf(cmd.OutOrStdout(), "counters: %v\n", err)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "counters: instructions can be counted per call on this machine\n")
				}
			}
			for _, m := range mechs {
				cal, err := calibrate.Run(cmd.Context(), calibrate.Options{Mechanism: m, Batches: batches, Log: cmd.ErrOrStderr()})
				if err != nil {
					return fmt.Errorf("calibrating %s: %w", m, err)
				}
				if err := calibrate.Save(cal); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-7s entry->entry %6.1f ns  entry->exit %6.1f ns  exit->entry %6.1f ns  exit->exit %6.1f ns  per call %7.1f ns  resolution %6.0f ns\n",
					m, cal.Overhead[0], cal.Overhead[1], cal.Overhead[2], cal.Overhead[3], cal.PerCall, cal.Resolution)
			}
			if path, err := calibrate.Path(); err == nil {
				fmt.Fprintf(cmd.OutOrStdout(), "stored in %s\n", path)
			}
			return nil
		},
	}
	c.Flags().StringSliceVar(&mechs, "mech", []string{"hook", "uprobe"}, "mechanisms to calibrate")
	c.Flags().IntVar(&batches, "batches", 5, "recordings whose intervals are pooled")
	c.Flags().BoolVar(&counters, "counters", false, "check whether per-call hardware counters (instructions retired) can be measured here")
	return c
}

func reportCmd() *cobra.Command {
	var (
		in, view, format, metric, root, by, thread string
		out                                        string
		labels                                     []string
		pid, tid                                   int
		min                                        float64
		raw, noInterrupts                          bool
		agg                                        model.Aggregation
	)
	c := &cobra.Command{
		Use:   "report",
		Short: "Print a report of a trace: tprof, flat, tree, arcflow, callflow or threads",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl, err := filter(cmd, pid, tid, thread, labels)
			if err != nil {
				return err
			}
			o := report.Options{View: view, Format: format, Min: min, Filter: fl, Raw: raw, Metric: metric, Root: root,
				By: by, ExcludeInterrupts: noInterrupts}
			defer collectLess(in)()
			log := cmd.ErrOrStderr()
			if len(labels) == 0 {
				// The records are read from the file again rather than
				// held: memory stays flat however many events the trace
				// has. A trace the stream cannot take is loaded; a label
				// filter needs the loaded profile, so it skips the
				// stream's pass over the file.
				s, err := streamProfile(in, cmd.ErrOrStderr(), agg)
				if err != nil {
					return err
				}
				if err := o.Filter.Check(s.Profile); err != nil {
					return err
				}
				err = writeOutput(cmd.OutOrStdout(), out, func(w io.Writer) error {
					if format == "html" {
						return web.WriteHTMLStream(w, s, htmlOptions(in, o.Filter))
					}
					return report.WriteStream(w, s, o)
				})
				if !errors.Is(err, model.ErrNotStreamable) {
					return err
				}
				log = io.Discard // the stream warned already
			}
			p, err := loadProfile(in, log, agg)
			if err != nil {
				return err
			}
			if err := o.Filter.Check(p); err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), out, func(w io.Writer) error {
				if format == "html" {
					return web.WriteHTML(w, p, htmlOptions(in, o.Filter))
				}
				return report.Write(w, p, o)
			})
		},
	}
	f := c.Flags()
	f.StringVarP(&in, "input", "i", "trueprof.trace", "trace file to read")
	f.StringVar(&view, "view", "flat", "tprof | flat | tree | arcflow | callflow (instrumented recordings) | threads")
	f.StringVar(&format, "format", "text", "text | json | html (the web UI as one self-contained file)")
	f.StringVarP(&out, "output", "o", "-", "file to write (- for standard output)")
	f.IntVar(&pid, "pid", 0, "only this process")
	f.IntVar(&tid, "tid", 0, "only this thread")
	f.StringVar(&thread, "thread", "", "only the threads one of whose names matches this glob (or with this tid, when a number)")
	f.StringVar(&by, "by", "", "thread | goroutine: one tree (threads: row, callflow: flow) per goroutine of a Go program (default: goroutine for the calls of an instrumented Go program, which return on whatever thread runs their goroutine; else thread)")
	labelFlag(c, &labels)
	f.Float64Var(&min, "min", 0, "hide entries below this percentage (tree: prune nodes whose cumulative share is lower)")
	f.BoolVar(&raw, "raw", false, "instrumented recordings: times as recorded, probe cost included (default: calibrated)")
	f.BoolVar(&noInterrupts, "exclude-interrupts", false, "remove the time of interrupts handled while a thread ran from its wall and CPU time")
	f.StringVar(&metric, "metric", "wall", "instrumented recordings and threads: wall | cpu | dispatches")
	f.StringVar(&root, "root", "", "instrumented recordings: only calls inside this function's subgraph")
	aggregationFlags(c, &agg)
	return c
}

func exportCmd() *cobra.Command {
	var in, format, out, thread, value string
	var labels []string
	var pid, tid int
	var agg model.Aggregation
	c := &cobra.Command{
		Use:   "export",
		Short: "Export a trace for other tools: pprof (go tool pprof) or folded stacks (flame graphs)",
		Long: `Export a trace for other tools: pprof's profile.proto (go tool pprof) or folded
stacks (flamegraph.pl, speedscope).

A sampling recording exports its samples. An instrumented recording exports
the call paths of its traced calls, as the reports show them (calibrated):
pprof sample types calls, wall (the default), wall_raw, cpu when context
switches were recorded, and samples with the event's period when sampled
alongside (go tool pprof -sample_index=calls); folded lines count the
--value sample type (default wall: self nanoseconds, calibrated).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := filter(cmd, pid, tid, thread, labels)
			if err != nil {
				return err
			}
			var write func(io.Writer, *model.Profile) error
			var writeStream func(io.Writer, *model.Stream) error
			switch format {
			case "pprof":
				if value != "" {
					return fmt.Errorf("--value applies to --format folded: a pprof export holds every value (go tool pprof -sample_index)")
				}
				write = func(w io.Writer, p *model.Profile) error { return export.PPROF(w, p, o) }
				writeStream = func(w io.Writer, s *model.Stream) error { return export.PPROFStream(w, s, o) }
			case "folded":
				write = func(w io.Writer, p *model.Profile) error { return export.Folded(w, p, o, value) }
				writeStream = func(w io.Writer, s *model.Stream) error { return export.FoldedStream(w, s, o, value) }
			default:
				return fmt.Errorf("--format %q: want pprof or folded", format)
			}
			log := cmd.ErrOrStderr()
			if len(labels) == 0 {
				// The trees, or the samples, come from one pass over the
				// records, none of which is held; a trace the stream
				// cannot take is loaded.
				s, err := streamProfile(in, log, agg)
				if err != nil {
					return err
				}
				if err := o.Check(s.Profile); err != nil {
					return err
				}
				err = writeOutput(cmd.OutOrStdout(), out, func(w io.Writer) error { return writeStream(w, s) })
				if !errors.Is(err, model.ErrNotStreamable) {
					return err
				}
				log = io.Discard // the stream warned already
			}
			p, err := loadProfile(in, log, agg)
			if err != nil {
				return err
			}
			if err := o.Check(p); err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), out, func(w io.Writer) error { return write(w, p) })
		},
	}
	f := c.Flags()
	f.StringVarP(&in, "input", "i", "trueprof.trace", "trace file to read")
	f.StringVar(&format, "format", "pprof", "pprof | folded")
	f.StringVarP(&out, "output", "o", "", "file to write (- for standard output)")
	f.IntVar(&pid, "pid", 0, "only this process")
	f.IntVar(&tid, "tid", 0, "only this thread")
	f.StringVar(&thread, "thread", "", "only the threads one of whose names matches this glob (or with this tid, when a number)")
	f.StringVar(&value, "value", "", "folded: what a line counts, a sample type of the pprof export: samples (default) or the period (cpu, or the event) of a sampling recording; wall (default: self ns, calibrated), wall_raw, calls, cpu, samples, the event of an instrumented one")
	labelFlag(c, &labels)
	aggregationFlags(c, &agg)
	c.MarkFlagRequired("output")
	return c
}

func demoCmd() *cobra.Command {
	var dir string
	var rounds int
	c := &cobra.Command{
		Use:   "demo",
		Short: "Build the bundled example with gcc, record it, and print its reports",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo.Run(cmd.Context(), cmd.OutOrStdout(), demo.Options{Dir: dir, Rounds: rounds})
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "keep the example binary and trace in this directory")
	c.Flags().IntVar(&rounds, "rounds", 1500, "work rounds of the example (about 1 ms each)")
	return c
}

// loadProfile opens a trace and groups its code as agg says, once for
// every view, export and the web UI; damage is reported but what precedes
// it is still used.
func loadProfile(path string, log io.Writer, agg model.Aggregation) (*model.Profile, error) {
	p, err := model.Open(path)
	if err != nil {
		return nil, err
	}
	if p.Err != nil {
		fmt.Fprintf(log, "trueprof: warning: %v\n", p.Err)
	}
	if err := p.Aggregate(agg); err != nil {
		return nil, err
	}
	return p, nil
}

// smallTrace is the size of a trace file below which its analysis runs
// with the garbage collector at smallTraceGC percent: it holds a few MB
// (the first pass keeps a small trace's records; the tables and trees of
// such a file are small), and collecting them from the default 4 MB
// target on took 3 ms of the 20 ms CPU of a tree report of 38k samples.
// A larger file's analysis collects as usual, its memory held to twice
// what it keeps.
const smallTrace = 1 << 20

// smallTraceGC is the GOGC of a small trace's analysis: 400 left about
// what GOGC=off leaves of the collector's cost.
const smallTraceGC = 400

// collectLess sets the collector's GOGC to smallTraceGC while a trace
// smaller than smallTrace at path is analysed, and returns the function
// that restores it. A GOGC the user set is theirs to keep.
func collectLess(path string) func() {
	st, err := os.Stat(path)
	if err != nil || st.Size() >= smallTrace || os.Getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(smallTraceGC)
	return func() { debug.SetGCPercent(old) }
}

// streamProfile opens a trace for a report that reads its records in a
// second pass (model.OpenStream), its code grouped as agg says; damage is
// reported as by loadProfile.
func streamProfile(path string, log io.Writer, agg model.Aggregation) (*model.Stream, error) {
	s, err := model.OpenStream(path)
	if err != nil {
		return nil, err
	}
	if s.Profile.Err != nil {
		fmt.Fprintf(log, "trueprof: warning: %v\n", s.Profile.Err)
	}
	if err := s.Profile.Aggregate(agg); err != nil {
		return nil, err
	}
	return s, nil
}

// aggregationFlags defines --granularity and --no-inlines, which report,
// export and serve share.
func aggregationFlags(c *cobra.Command, agg *model.Aggregation) {
	c.Flags().Var(&agg.Granularity, "granularity", "what an entry is, as pprof's options of the same names: functions | files (a source file; [module] without line information) | lines (a function at a source line) | addresses (a function at an instruction)")
	c.Flags().BoolVar(&agg.NoInlines, "no-inlines", false, "charge inlined code to the function it was inlined into, as perf and pprof -noinlines do (default: inlined functions are entries of their own)")
}

// labelFlag defines --label, which report and export share.
func labelFlag(c *cobra.Command, labels *[]string) {
	c.Flags().StringArrayVar(labels, "label", nil, "only goroutines carrying this runtime/pprof label at the time: KEY=VALUE, the value a glob (repeatable: ANDed across keys, ORed within one)")
}

// filter selects the --pid, --tid, --thread and --label given on the
// command line; it fails for a bad thread glob or label pattern.
func filter(cmd *cobra.Command, pid, tid int, thread string, labels []string) (model.Filter, error) {
	f := model.Filter{Thread: thread, Labels: labels}
	if cmd.Flags().Changed("pid") {
		f.PID, f.HasPID = uint32(pid), true
	}
	if cmd.Flags().Changed("tid") {
		f.TID, f.HasTID = uint32(tid), true
	}
	if _, err := f.Compile(); err != nil {
		return model.Filter{}, err
	}
	return f, nil
}

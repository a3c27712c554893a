package record

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"trueprof/internal/hook"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// chooseMech is where the probe mechanism is chosen, once per recording:
// hooks when the command was built with -finstrument-functions (unless
// uprobes are asked for), uprobes when functions are named to trace or
// uprobes asked for, and MechAuto, no probes, otherwise. An attached
// process gets uprobes only: hooks are loaded at exec. Probing a command
// that is not an ELF executable (a #! script) is an error that says what
// to do (notELF); sampling it is not. Hooks that cannot be used (a static
// executable) are said on log when the recording falls back to samples
// only.
func chooseMech(cfg Config, log io.Writer) (Mech, error) {
	named := len(cfg.Trace) > 0 || cfg.Root != "" || cfg.Mech == MechUprobe
	if len(cfg.Command) == 0 {
		if named {
			return MechUprobe, nil
		}
		return MechAuto, nil
	}
	path, err := targetPath(cfg.Command, 0)
	if err != nil {
		if cfg.Mech == MechHook {
			return MechAuto, err
		}
		// Launching says what is wrong with the command.
		return cfg.Mech, nil
	}
	if err := notELF(path); err != nil {
		if named || cfg.Mech == MechHook {
			return MechAuto, err
		}
		return MechAuto, nil // sampled: the kernel runs its interpreter
	}
	if cfg.Mech == MechUprobe {
		return MechUprobe, nil
	}
	ok, err := hook.Instrumented(path)
	switch {
	case ok:
		return MechHook, nil
	case cfg.Mech == MechHook && err != nil:
		return MechAuto, err
	case cfg.Mech == MechHook:
		return MechAuto, fmt.Errorf("mechanism hook: %s was not built with -finstrument-functions", path)
	case named:
		return MechUprobe, nil
	case errors.Is(err, hook.ErrNotInterposable):
		fmt.Fprintf(log, "trueprof: %v; recording samples only\n", err)
	}
	return MechAuto, nil
}

// errNotELF is wrapped by the error of probing a command that is not an
// ELF executable: a #! script, or any other file the kernel runs through
// an interpreter.
var errNotELF = errors.New("not an ELF executable")

// notELF returns an error wrapping errNotELF when the file at path is not
// an ELF file, naming the interpreter of a #! script and how to probe it,
// and nil for an ELF file or one that cannot be read (launching says what
// is wrong with it).
func notELF(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	head := make([]byte, 256)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if bytes.HasPrefix(head, []byte(elf.ELFMAG)) {
		return nil
	}
	interp, ok := scriptInterpreter(head)
	if !ok {
		return fmt.Errorf("%s: %w: --trace, --root and hooks probe ELF programs; record it without them to sample it", path, errNotELF)
	}
	return fmt.Errorf("%s: %w: a script run by %s; --trace, --root and hooks probe the functions of ELF programs, so trace the interpreter's own functions (trueprof record --trace 'FUNC' -- %s %s), or record the script without --trace to sample it",
		path, errNotELF, interp, interp, path)
}

// scriptInterpreter returns the interpreter a #! line names, with its
// argument ("/usr/bin/env python3" names python3's path when it is found
// on PATH, as env would find it).
func scriptInterpreter(head []byte) (string, bool) {
	line, ok := bytes.CutPrefix(head, []byte("#!"))
	if !ok {
		return "", false
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	fields := strings.Fields(string(line))
	switch {
	case len(fields) == 0:
		return "", false
	case filepath.Base(fields[0]) == "env" && len(fields) > 1 && !strings.HasPrefix(fields[1], "-"):
		if p, err := exec.LookPath(fields[1]); err == nil {
			return p, true
		}
		return fields[1], true
	}
	return strings.Join(fields, " "), true
}

// noteFork says once, when a process the target forks is seen, that
// uprobes do not follow it: their kernel filter is the target's pid.
func (s *session) noteFork() {
	if s.mech != MechUprobe || s.notedFork {
		return
	}
	s.notedFork = true
	fmt.Fprintf(s.log, "trueprof: the target forked a process: uprobes probe the target's process only, so the calls of its children are not counted (samples are)\n")
}

// prepareProbes prepares mechanism mech (chooseMech) before the target
// runs: the hooks' shared memory, which the launched command inherits
// (lo says how), or the uprobe planner with the probes planned in the
// executable and its libraries.
func (s *session) prepareProbes(mech Mech, pid int) (lo launchOptions, err error) {
	s.mech = mech
	switch mech {
	case MechHook:
		if s.region, err = hook.NewRegion(hook.Options{}); err != nil {
			return lo, err
		}
		lo.files = []*os.File{s.region.File()}
		// The wrapper has the gate on descriptor 3; extra files follow.
		lo.env = s.region.Env(4)
		if s.cfg.CalibrateInRun {
			lo.env = append(lo.env, hook.EnvCalibrate+"=1")
		}
	case MechUprobe:
		if s.uprobes, err = newUprobePlanner(s.cfg, pid, s.log); err != nil {
			return lo, err
		}
		s.planner = s.uprobes
	}
	return lo, nil
}

// startProbes starts the prepared mechanism once the target process
// exists (launched: stopped before exec): the hooks' drainer, or the
// planned uprobes.
func (s *session) startProbes(pid int, launched bool) error {
	switch s.mech {
	case MechHook:
		h, err := newHookSource(s.region)
		if err != nil {
			return err
		}
		s.region = nil // the source closes it
		s.sources = append(s.sources, h)
	case MechUprobe:
		return s.uprobes.start(pid, launched, s.res, s.w, s.pauses, s.addSource)
	}
	return nil
}

// addSource adds a probe source to the session's; one added while the
// loop runs is polled from then on, so that an entry that holds the
// target (lazy.go) wakes the loop at once.
func (s *session) addSource(src eventSource) {
	s.sources = append(s.sources, src)
	if s.poller != nil {
		if err := s.poller.Add(src.fds()...); err != nil {
			fmt.Fprintf(s.log, "trueprof: probes placed while recording are read every loop pass only: %v\n", err)
		}
	}
}

// detach removes the probes when recording stops and returns the detach
// time, 0 when no function was probed. Events count until then: an exit
// after it may be of a call whose entry came after it too (a return
// probe still catches the calls entered while the entry probes come off),
// so the calls still open then end there. Hooks cannot be removed: their
// detach time is when their last events were collected.
func (s *session) detach() uint64 {
	t := perf.Now()
	// Removing probes from a running target makes it wait as placing
	// them does.
	removed := s.pauses.placing()
	for _, src := range s.sources {
		if u, ok := src.(*uprobeSource); ok {
			u.end = min(u.end, t) // a set removed while running ended then
		}
		src.finish()
	}
	removed()
	if s.planner != nil {
		s.planner.stop()
	}
	switch s.mech {
	case MechAuto:
		return 0
	case MechHook:
		return perf.Now()
	}
	return t
}

// uprobeSource reads the events of a set of uprobes.
type uprobeSource struct {
	set    *uprobe.Set
	starts []uint64 // file offset of each site's function start
	module uint32   // string id of the probed file's path
	// Events count from when every probe was in place (from; until
	// accept, math.MaxUint64) until the detach began (end): every entry
	// counted then has its exit counted, or its call is open at end.
	// probes are the Probe records accept writes.
	from, end uint64
	probes    []trace.Probe
	// siteEnd is, per site, when its probe was removed while the set's
	// others stay (nil until one is: ctl trace remove); removed counts
	// those sites. The set is detached when all of them are.
	siteEnd []uint64
	removed int
	// points is the number of probe points in the target: an entry and
	// a return probe, or RET-instruction probes, per site.
	points int
	// onHold is told of each entry that held the target (uprobe.Event
	// Held), counted or not: the target waits for it (lazy.go). nil when
	// no site holds.
	onHold func(u *uprobeSource, e uprobe.Event)
}

func (u *uprobeSource) fds() []int { return u.set.Fds() }

// drain passes the events that count. Exits of calls entered before
// from pass too; the analysis ignores an exit with no open call.
func (u *uprobeSource) drain(fn func(instrEvent)) {
	u.set.Read(func(e uprobe.Event) {
		if e.Held && u.onHold != nil {
			u.onHold(u, e)
		}
		if e.Time < u.from || e.Time >= u.end || (u.siteEnd != nil && e.Time >= u.siteEnd[e.Site]) {
			return
		}
		kind := trace.EventExit
		if e.Entry {
			kind = trace.EventEntry
		}
		fn(instrEvent{time: e.Time, pid: e.PID, tid: e.TID, kind: kind, module: u.module, addr: u.starts[e.Site]})
	})
}

// finish removes the probes; the events they wrote stay to be drained.
func (u *uprobeSource) finish() { u.set.Detach() }

func (u *uprobeSource) lost() uint64 { return u.set.Lost() }
func (u *uprobeSource) close() error { return u.set.Close() }

// fileOffsets returns the file offsets of the sites' functions, which is
// how the resolver names code: an event names the function's first
// instruction, wherever its probe sits.
func fileOffsets(sites []uprobe.Site) []uint64 {
	out := make([]uint64, len(sites))
	for i, s := range sites {
		out[i] = s.StartOffset
	}
	return out
}

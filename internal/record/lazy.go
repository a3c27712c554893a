package record

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trueprof/internal/perf"
	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// callGraph finds the direct callees of a module's functions, for --root
// (Scheme B): when a probed function first runs, the functions
// it calls directly are probed in turn, so only the root's subgraph pays
// for probes.
type callGraph struct {
	f *symbolize.File
}

func openCallGraph(path string) (*callGraph, error) {
	f, err := symbolize.OpenFileOptions(path, symbolize.Options{NoDebugFile: true})
	if err != nil {
		return nil, err
	}
	return &callGraph{f: f}, nil
}

func (g *callGraph) close() error { return g.f.Close() }

// callees returns the names of the functions of this module that the
// function at vaddr calls directly (symbolize.File.Callees), each once.
func (g *callGraph) callees(vaddr uint64) []string {
	var out []string
	seen := map[string]bool{}
	for _, fn := range g.f.Callees(vaddr) {
		if !seen[fn.Name] {
			seen[fn.Name] = true
			out = append(out, fn.Name)
		}
	}
	return out
}

// Holding the target (Scheme B made synchronous, as JFluid does it): a
// function of the root's subgraph that calls functions not probed yet
// holds the target at its first entry. Its probe stops the process
// (uprobe.Site.Hold: SIGSTOP to the entering thread, so the whole thread
// group stops) and wakes the recorder at once; the recorder waits for
// every thread to stop, probes the callees of every function entered so
// (a whole level at a time), releases those functions, whose later
// entries run on, and resumes the target with SIGCONT. The first call of
// every function below the root is then seen, and the target stops once
// per function of the subgraph that it runs and that calls others. The
// time stopped is an Adjust record for each thread that stopped, from the
// first held entry on, which the analysis removes from the calls it falls
// in, and a Pause record from the moment every thread was stopped, which
// the report's header counts.

// heldEntry is an entry that held the target: the function, when, and
// in which process; load marks the dynamic linker's notice of a change
// of its loaded objects (watchLoads).
type heldEntry struct {
	key  liveKey
	time uint64
	pid  uint32
	load bool
}

// onHold notes an entry that held the target; releaseHolds acts on it.
func (p *uprobePlanner) onHold(u *uprobeSource, e uprobe.Event) {
	p.held = append(p.held, heldEntry{key: liveKey{u.module, u.starts[e.Site]}, time: e.Time, pid: e.PID})
}

// onLoad notes that the dynamic linker held the target (watchLoads);
// releaseHolds probes what it mapped.
func (p *uprobePlanner) onLoad(_ *uprobeSource, e uprobe.Event) {
	p.held = append(p.held, heldEntry{time: e.Time, pid: e.PID, load: true})
}

// holdWait is how long the recorder waits for every thread of a held
// target to stop. A thread stops when it next leaves the kernel, at once
// for one that computes or sleeps interruptibly; one in an uninterruptible
// wait (disk I/O) may take longer, and the recorder goes on without it:
// should it enter a function that holds, it stops the target again.
const holdWait = 50 * time.Millisecond

// releaseHolds expands the functions whose entries held the target,
// probes the libraries mapped when the dynamic linker held it, and
// resumes it, once every thread has stopped, and writes the time it was
// held. It does nothing when no entry held.
func (s *session) releaseHolds() error {
	p := s.uprobes
	if p == nil || len(p.held) == 0 {
		return nil
	}
	pid := int(p.held[0].pid)
	stopped := waitStopped(pid, holdWait)
	// From now on no thread runs, so no event falls in the Pause record
	// (the held entries and the events of the threads the stop reached
	// later come before).
	still := perf.Now()
	// A thread that entered a function that holds before the stop
	// reached it has its entry in the ring now: its function is expanded
	// with the others, before SIGCONT drops its pending SIGSTOP.
	s.drainEvents(false, math.MaxUint64)
	start := uint64(math.MaxUint64)
	loaded := false
	for _, h := range p.held {
		start = min(start, h.time)
		if h.load {
			loaded = true
		} else {
			p.expand(int(h.pid), h.key)
		}
	}
	if loaded {
		// The libraries the dynamic linker has mapped, before any of
		// their code runs: those planned already are passed over.
		for _, f := range mappedFiles(pid) {
			if err := p.moduleMapped(uint32(pid), f, 0); err != nil {
				return err
			}
		}
	}
	p.held = p.held[:0]
	// Taken before SIGCONT: a thread it wakes may run at once, and its
	// next event must come after the hold's end.
	end := perf.Now()
	p.resume(pid)
	p.refill()
	if len(stopped) == 0 || end <= start {
		return nil // the process was gone, or never stopped
	}
	p.holds++
	p.heldNS += end - min(still, end)
	// Written in time order with the events, as the hooks' adjustments
	// are (processEvent): every event drained so far is older.
	for _, tid := range stopped {
		s.pendingEvents = append(s.pendingEvents, instrEvent{time: end, pid: uint32(pid), tid: tid, addr: end - start})
	}
	return s.w.Write(&trace.Pause{Time: end, Duration: end - min(still, end)})
}

// waitStopped waits up to limit for every thread of process pid to be
// stopped (or gone) and returns the stopped ones.
func waitStopped(pid int, limit time.Duration) []uint32 {
	deadline := time.Now().Add(limit)
	for {
		tids, _ := threads(pid)
		var stopped []uint32
		all := true
		for _, tid := range tids {
			switch st, ok := procState(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid)); {
			case !ok || st == 'Z' || st == 'X':
			case st == 'T' || st == 't':
				stopped = append(stopped, uint32(tid))
			default:
				all = false
			}
		}
		if all || time.Now().After(deadline) {
			return stopped
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// resume continues process pid after a hold, unless a stop was asked for
// while it was held (SIGSTOP, or SIGTSTP, SIGTTIN or SIGTTOU at their
// default action, pending for the process; SIGCONT would drop it): that
// stop is its sender's, and the target stays stopped, as it would have
// without trueprof.
func (p *uprobePlanner) resume(pid int) {
	if sig := pendingStop(pid); sig != 0 {
		fmt.Fprintf(p.log, "trueprof: the target was sent %v while held for probing: left stopped\n", unix.SignalName(sig))
		return
	}
	if err := unix.Kill(pid, unix.SIGCONT); err != nil && !errors.Is(err, unix.ESRCH) {
		fmt.Fprintf(p.log, "trueprof: resuming the target after probing: %v\n", err)
	}
}

// pendingStop returns a stop signal pending for process pid as a whole
// (ShdPnd in /proc/PID/status), 0 if none. The holds' own SIGSTOPs are
// sent to threads, so they are never among them.
func pendingStop(pid int) syscall.Signal {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	masks := map[string]uint64{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "ShdPnd" || k == "SigIgn" || k == "SigCgt") {
			masks[k], _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	bit := func(sig syscall.Signal) uint64 { return 1 << (sig - 1) }
	for _, sig := range []syscall.Signal{unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU} {
		defaulted := sig == unix.SIGSTOP || (masks["SigIgn"]|masks["SigCgt"])&bit(sig) == 0
		if masks["ShdPnd"]&bit(sig) != 0 && defaulted {
			return sig
		}
	}
	return 0
}

// refill loads the BPF side of the next set an expansion places while
// the target is not held (uprobe.Load): creating its ring took 2 of the
// 2.5 ms of placing a set here. Without it, the set is placed whole.
func (p *uprobePlanner) refill() {
	if p.spare != nil || p.root == "" || p.stopped {
		return
	}
	var err error
	if p.spare, err = uprobe.Load(); err != nil {
		p.spare = nil
	}
}

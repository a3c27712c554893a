package record

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// eventGoID marks an instrEvent that is a goroutine switch, not a
// function entry or exit: its addr is the goroutine id. It travels with
// the probes' events so that it is merged with the samples in time
// order, like them.
const eventGoID trace.EventKind = 0xff

// startGoroutines follows the goroutines of a Go target (Config's
// NoGoroutines turns it off): one uprobe on the scheduler reports each
// switch, written as a trace.GoID record, so that every sample and event
// of a thread can be given to the goroutine it ran. It is not a reason
// to stop recording: a target that is not Go is left alone, and one
// whose goroutines cannot be followed is said once and recorded without.
func (s *session) startGoroutines(pid int) {
	if s.cfg.NoGoroutines {
		return
	}
	path, err := targetPath(s.cfg.Command, pid)
	if err != nil {
		return // launching or attaching fails on its own
	}
	layout, err := symbolize.ReadGoLayout(path)
	if errors.Is(err, symbolize.ErrNotGo) {
		return
	}
	if err == nil {
		var g *uprobe.Goroutines
		if g, err = uprobe.AttachGoroutines(pid, path, layout); err == nil {
			s.sources = append(s.sources, &goroutineSource{g: g, log: s.log, start: perf.Now()})
			s.startLabels(pid, path, layout)
			s.aggregateGoroutines()
			return
		}
	}
	hint := ""
	if errors.Is(err, symbolize.ErrNoGoDWARF) {
		hint = "; rebuild without -ldflags=-w to follow them"
	}
	fmt.Fprintf(s.log, "trueprof: goroutines not recorded (samples and events are per thread only): %v%s\n", err, hint)
}

// targetPath is the executable of a command to launch (found on PATH as
// exec does) or of running process pid.
func targetPath(command []string, pid int) (string, error) {
	if len(command) == 0 {
		p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			return "", fmt.Errorf("attaching to %d: %w", pid, err)
		}
		return p, nil
	}
	p, err := exec.LookPath(command[0])
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// goSwitchCost is what following goroutines adds to one goroutine
// switch of the target: an emulated uprobe hit and its BPF program,
// measured by bench/goroutines (1.0 to 1.3 µs on the development VM,
// where the switch itself takes about 0.25 µs).
const goSwitchCost = 1100 * time.Nanosecond

// goroutineSource delivers a Go target's goroutine switches as events.
type goroutineSource struct {
	g     *uprobe.Goroutines
	log   io.Writer
	start uint64 // when the probe was placed, CLOCK_MONOTONIC ns
	n     uint64 // switches read
	// last holds the switches finish read, which the next drain delivers.
	last []instrEvent
}

func (s *goroutineSource) fds() []int { return s.g.Fds() }

func (s *goroutineSource) drain(fn func(instrEvent)) {
	for _, e := range s.last {
		fn(e)
	}
	s.last = nil
	s.n += uint64(s.g.Read(func(sw uprobe.GoSwitch) {
		fn(instrEvent{time: sw.Time, pid: sw.PID, tid: sw.TID, addr: sw.GoID, kind: eventGoID})
	}))
}

// finish collects the last switches, and says when following goroutines
// cost the target more than a twentieth of its time: a program that
// switches goroutines hundreds of thousands of times a second runs
// several times slower, and is better sampled without
// (Config.NoGoroutines).
func (s *goroutineSource) finish() {
	var last []instrEvent
	s.drain(func(e instrEvent) { last = append(last, e) })
	s.last = last
	elapsed := time.Duration(perf.Now() - s.start)
	cost := time.Duration(s.n) * goSwitchCost
	if elapsed <= 0 || cost < elapsed/20 {
		return
	}
	fmt.Fprintf(s.log, "trueprof: following goroutines: %d goroutine switches at about %v each cost the target about %v of %v; record without goroutines to avoid it\n",
		s.n, goSwitchCost, cost.Round(time.Millisecond), elapsed.Round(time.Millisecond))
}

func (s *goroutineSource) lost() uint64 { return s.g.Lost() }
func (s *goroutineSource) close() error { return s.g.Close() }

// writeGoID writes the trace record of a goroutine switch.
func (s *session) writeGoID(e *instrEvent) error {
	return s.w.Write(&trace.GoID{Time: e.time, PID: e.pid, TID: e.tid, GoID: e.addr})
}

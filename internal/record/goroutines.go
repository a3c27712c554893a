package record

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

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
func (s *session) startGoroutines(pid int, launched bool) {
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
		if g, err = uprobe.AttachGoroutines(pid, path, layout, launched); err == nil {
			s.sources = append(s.sources, &goroutineSource{g: g})
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

// goroutineSource delivers a Go target's goroutine switches as events.
type goroutineSource struct {
	g *uprobe.Goroutines
}

func (s *goroutineSource) fds() []int { return s.g.Fds() }

func (s *goroutineSource) drain(fn func(instrEvent)) {
	s.g.Read(func(sw uprobe.GoSwitch) {
		fn(instrEvent{time: sw.Time, pid: sw.PID, tid: sw.TID, addr: sw.GoID, kind: eventGoID})
	})
}

func (s *goroutineSource) finish()      {}
func (s *goroutineSource) lost() uint64 { return s.g.Lost() }
func (s *goroutineSource) close() error { return s.g.Close() }

// writeGoID writes the trace record of a goroutine switch.
func (s *session) writeGoID(e *instrEvent) error {
	return s.w.Write(&trace.GoID{Time: e.time, PID: e.pid, TID: e.tid, GoID: e.addr})
}

package record

import (
	"fmt"
	"os"
	"time"

	"trueprof/internal/control"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// controlState is the session's side of `trueprof ctl`: the socket
// server, the requests it hands to the recording loop, and the pauses.
// Requests are carried out by the loop itself, between two drains, so
// they see and change the session as the loop leaves it: no lock on the
// hot path.
type controlState struct {
	srv   *control.Server
	calls chan controlCall
	wake  *perf.Wakeup  // wakes the loop's poll for a request
	done  chan struct{} // closed when the loop stops taking requests
	start uint64        // when recording began (trace clock)
	stop  bool          // ctl stop was asked for

	// pausedAt is when the open pause began (0: not paused); records
	// from then on are dropped. closed holds the closed pauses, oldest
	// first, that records still to be processed may fall in: records
	// come reorderSlack late, and a hooked target's events later still
	// when the drainer falls behind, so records of several closed
	// pauses may still wait.
	pausedAt              uint64
	closed                []pauseSpan
	pauses                int
	pausedNS              uint64
	dropped, pauseDropped uint64
}

// pauseSpan is a closed pause: records of times in [start, end) are
// dropped.
type pauseSpan struct{ start, end uint64 }

// controlCall is one request on its way to the loop, and where the
// answer goes.
type controlCall struct {
	req  control.Request
	file *os.File
	ans  chan control.Answer
}

// controlQueue is how many requests may wait for the loop. The queue
// must hold a request before the loop is woken for it (handleControl):
// an unbuffered send completed only once the loop, woken by its poll's
// timeout, took it, so every request waited up to 100 ms.
const controlQueue = 16

// startControl opens the session's control socket. A recording whose
// socket cannot be made goes on without one, with a warning: control is
// a convenience, the recording is the point.
func (s *session) startControl(pid int, launched bool) {
	s.ctl = controlState{calls: make(chan controlCall, controlQueue), done: make(chan struct{}), start: perf.Now()}
	wake, err := perf.NewWakeup()
	if err != nil {
		fmt.Fprintf(s.log, "trueprof: no control socket: %v\n", err)
		return
	}
	info := control.Info{PID: os.Getpid(), Output: s.cfg.Output, Start: time.Now(), Target: s.cfg.Command}
	if !launched {
		info.Attach = pid
	}
	srv, err := control.Listen(info, s.handleControl)
	if err != nil {
		wake.Close()
		fmt.Fprintf(s.log, "trueprof: no control socket (trueprof ctl will not see this recording): %v\n", err)
		return
	}
	s.ctl.srv, s.ctl.wake = srv, wake
}

// stopControl closes the socket; requests still waiting are answered
// that the recording ended.
func (s *session) stopControl() {
	if s.ctl.srv == nil {
		return
	}
	close(s.ctl.done)
	s.ctl.srv.Close()
	s.ctl.wake.Close()
	s.ctl.srv = nil
}

// controlFds are the descriptors the loop polls for requests.
func (s *session) controlFds() []int {
	if s.ctl.wake == nil {
		return nil
	}
	return []int{s.ctl.wake.Fd()}
}

// handleControl runs on a connection's goroutine: it queues the request
// for the loop, wakes it, and waits for the answer.
func (s *session) handleControl(req control.Request, file *os.File) control.Answer {
	c := controlCall{req: req, file: file, ans: make(chan control.Answer, 1)}
	select {
	case s.ctl.calls <- c:
	case <-s.ctl.done:
		return control.Answer{Error: "the recording is ending"}
	}
	s.ctl.wake.Signal()
	select {
	case a := <-c.ans:
		return a
	case <-s.ctl.done:
		return control.Answer{Error: "the recording is ending"}
	}
}

// serveControl carries out the requests waiting, in the loop, and
// returns "ctl" when one asked to stop.
func (s *session) serveControl() (string, error) {
	if s.ctl.wake == nil {
		return "", nil
	}
	s.ctl.wake.Clear()
	for {
		select {
		case c := <-s.ctl.calls:
			a, err := s.controlRequest(c.req, c.file)
			if err != nil {
				a = control.Answer{Error: err.Error()}
			}
			if a.Error == "" {
				a.Status = s.controlStatus()
			}
			c.ans <- a
		default:
			if s.ctl.stop {
				return "ctl", nil
			}
			return "", nil
		}
	}
}

// controlRequest carries out one request.
func (s *session) controlRequest(req control.Request, file *os.File) (control.Answer, error) {
	now := perf.Now()
	switch req.Cmd {
	case control.CmdPause:
		if s.ctl.pausedAt != 0 {
			return control.Answer{Error: "already paused"}, nil
		}
		s.ctl.pausedAt, s.ctl.pauseDropped = now, 0
		s.ctl.pauses++
	case control.CmdResume:
		if s.ctl.pausedAt == 0 {
			return control.Answer{Error: "not paused"}, nil
		}
		// The records of the pause still in the backlog are dropped by
		// time (drop); the Pause record counts those seen so far.
		return control.Answer{}, s.endPause(now)
	case control.CmdStop:
		s.ctl.stop = true
	case control.CmdSnapshot:
		return s.snapshot(file, now)
	case control.CmdReset:
		if s.agg == nil {
			return control.Answer{Error: ErrNotAggregated.Error()}, nil
		}
		// What is old enough to be in order counts before the reset.
		if err := s.drain(false); err != nil {
			return control.Answer{}, err
		}
		s.agg.resets++
		return control.Answer{}, s.resetTrees(now)
	case control.CmdTraceAdd, control.CmdTraceRemove, control.CmdRoot:
		return s.probeRequest(req)
	}
	return control.Answer{}, nil
}

// endPause closes the open pause at t and writes its Pause record.
func (s *session) endPause(t uint64) error {
	if s.ctl.pausedAt == 0 {
		return nil
	}
	p := s.openPause(t)
	s.ctl.closed = append(s.ctl.closed, pauseSpan{s.ctl.pausedAt, t})
	s.ctl.pausedAt = 0
	s.ctl.pausedNS += p.Duration
	return s.w.Write(&p)
}

// openPause is the Pause record of the open pause if it ended at t.
func (s *session) openPause(t uint64) trace.Pause {
	return trace.Pause{Time: t, Duration: t - min(s.ctl.pausedAt, t), Dropped: s.ctl.pauseDropped}
}

// drop reports whether a sample or event of time t falls in a pause,
// counting it if so. A closed pause is forgotten once records a reorder
// window (model.ReorderWindow) after its end come: the analysis, too,
// takes records later than that as out of order.
func (s *session) drop(t uint64) bool {
	c := &s.ctl
	for len(c.closed) > 0 && t >= c.closed[0].end+model.ReorderWindow {
		c.closed = c.closed[1:]
	}
	in := c.pausedAt != 0 && t >= c.pausedAt
	for _, p := range c.closed {
		in = in || (t >= p.start && t < p.end)
	}
	if in {
		c.dropped++
		c.pauseDropped++
		return true
	}
	return false
}

// snapshot writes a complete trace of everything processed so far to
// file: what is old enough to be in order is processed first, then the
// writer copies the file and closes the copy as the end of recording
// would (an open pause, the probes' detach time for the calls still
// open, an End with the reason "snapshot").
func (s *session) snapshot(file *os.File, now uint64) (control.Answer, error) {
	if err := s.drain(false); err != nil {
		return control.Answer{}, err
	}
	// An aggregated recording's trees so far: the copy holds them.
	if err := s.snapshotTrees(now); err != nil {
		return control.Answer{}, err
	}
	var tail []trace.Record
	if s.ctl.pausedAt != 0 {
		p := s.openPause(now)
		tail = append(tail, &p)
	}
	end := trace.End{Time: now, ExitCode: -1}
	if s.mech != MechAuto {
		end.Detached = now
	}
	n, err := s.w.Snapshot(file, s.file, end, "snapshot", tail...)
	if err != nil {
		return control.Answer{}, err
	}
	return control.Answer{Bytes: n}, nil
}

// controlStatus is the session's state for ctl status.
func (s *session) controlStatus() *control.Status {
	now := perf.Now()
	st := &control.Status{
		Target:    s.cfg.Command,
		PID:       s.pid,
		Attached:  len(s.cfg.Command) == 0,
		Output:    s.cfg.Output,
		Events:    s.result.Events,
		Samples:   s.result.Samples,
		Lost:      s.result.Lost,
		Dropped:   s.ctl.dropped,
		Bytes:     s.w.Size(),
		Paused:    s.ctl.pausedAt != 0,
		Pauses:    s.ctl.pauses,
		PausedNS:  time.Duration(s.ctl.pausedNS),
		ElapsedNS: time.Duration(now - min(s.ctl.start, now)),
	}
	if st.Paused {
		st.PausedNS += time.Duration(s.openPause(now).Duration)
	}
	if s.mech != MechAuto {
		st.Mech = string(s.mech)
	}
	if s.agg != nil {
		st.Aggregated, st.TreeNodes, st.Resets = true, uint64(s.agg.live.Nodes()), s.agg.resets
	}
	if s.uprobes != nil {
		st.Probes = len(s.uprobes.live)
	}
	return st
}

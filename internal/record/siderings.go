package record

import (
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// sideRings are the interrupt and counter rings. A goroutine of their own
// reads them as soon as they wake: their records come in bursts (a
// thread faulting in a large buffer writes a sample per page), and the
// loop, busy processing, can leave the rings unread long enough to
// overflow (400 ms was seen while it resolved a new module's symbols).
// The interrupt records wait in irqs until the loop merges them with the
// sampling rings' records; counter samples are counted at once.
type sideRings struct {
	mu       sync.Mutex
	poll     *ringPoll // the goroutine, once started
	irqs     []perf.Record
	lost     uint64 // records the kernel lost
	unparsed uint64
}

// readOtherRings moves what the side rings hold into the session: the
// interrupt records to s.pending, the losses to Lost records. It reads
// the rings itself too, after the sampling rings were read, so that a
// thread's counts are complete when its exit, read there, is processed.
// The first call starts the goroutine, the final one stops it.
func (s *session) readOtherRings(final bool) {
	if len(s.irq.rings) == 0 && len(s.counters.rings) == 0 {
		return
	}
	if final {
		s.stopSideRings()
	} else if s.side.poll == nil {
		s.startSideRings()
	}
	sr := &s.side
	sr.mu.Lock()
	s.readIRQ()
	s.readCounters()
	s.pending = append(s.pending, sr.irqs...)
	clear(sr.irqs) // they hold raw data the collector may free
	sr.irqs = sr.irqs[:0]
	lost, unparsed := sr.lost, sr.unparsed
	sr.lost, sr.unparsed = 0, 0
	sr.mu.Unlock()
	// The records carry no time, or one out of order: the loss is as
	// late as it can have been.
	if lost > 0 {
		s.lost(trace.LostKernel, lost, perf.Now())
	}
	if unparsed > 0 {
		s.lost(trace.LostUnparsed, unparsed, perf.Now())
	}
}

func (s *session) startSideRings() {
	fds := append([]int(nil), s.irq.fds...)
	for _, fd := range s.counters.owners {
		fds = append(fds, fd)
	}
	sr := &s.side
	// Without the goroutine (an error) the loop's own reads will do.
	sr.poll, _ = startRingPoll(fds, func() {
		sr.mu.Lock()
		s.readIRQ()
		s.readCounters()
		sr.mu.Unlock()
	})
}

// readerNice is the nice value of the threads that empty the rings:
// the perf rings' readers (pollRings) and the hooks' drainer.
const readerNice = -10

// ringPoll is a goroutine that empties rings (pollRings) and what stops
// it.
type ringPoll struct {
	stop, done chan struct{}
	// kick is in the poller and signalled after stop is closed, so that
	// a stop does not wait for the timeout (up to 50 ms, twice, at the
	// end of every recording).
	kick *perf.Wakeup
}

// startRingPoll starts pollRings over the rings whose events are fds.
func startRingPoll(fds []int, read func()) (*ringPoll, error) {
	kick, err := perf.NewWakeup()
	if err != nil {
		return nil, err
	}
	poller, err := perf.NewPoller(append(slices.Clip(fds), kick.Fd()))
	if err != nil {
		kick.Close()
		return nil, err
	}
	p := &ringPoll{stop: make(chan struct{}), done: make(chan struct{}), kick: kick}
	go pollRings(poller, p.stop, p.done, read)
	return p, nil
}

// end stops the goroutine and waits for its end; it reports whether
// this call stopped it (later calls return at once).
func (p *ringPoll) end() bool {
	select {
	case <-p.stop:
		return false
	default:
	}
	close(p.stop)
	p.kick.Signal()
	<-p.done
	p.kick.Close()
	return true
}

// pollRings calls read whenever a ring of poller's has data or 50 ms
// pass, until stop is closed; it then closes poller and done.
//
// Its thread runs at a higher priority (readerNice) than the target and
// the rest of the recorder: on a loaded machine (load 50-150 on 2 CPUs
// was seen) a reader at the target's priority waited for a CPU longer
// than a ring lasts. The thread is its own (locked) and ends with it.
func pollRings(poller *perf.Poller, stop, done chan struct{}, read func()) {
	defer close(done)
	defer poller.Close()
	runtime.LockOSThread()
	// Without CAP_SYS_NICE the priority stays: the reader still works.
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), readerNice)
	for {
		select {
		case <-stop:
			return
		default:
		}
		if poller.Wait(50) != nil {
			return
		}
		read()
	}
}

// stopSideRings stops the goroutine before the rings are read a last
// time or unmapped.
func (s *session) stopSideRings() {
	if s.side.poll != nil {
		s.side.poll.end()
	}
}

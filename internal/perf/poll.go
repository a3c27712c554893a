package perf

import (
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// Poller waits for any of several event descriptors to have data: one
// epoll loop for all rings, not a goroutine per descriptor.
type Poller struct {
	epfd   int
	events []unix.EpollEvent
}

// NewPoller returns a Poller watching fds for input.
func NewPoller(fds []int) (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	p := &Poller{epfd: epfd, events: make([]unix.EpollEvent, len(fds)+1)}
	if err := p.Add(fds...); err != nil {
		unix.Close(epfd)
		return nil, err
	}
	return p, nil
}

// Add watches fds for input too: descriptors opened after the Poller
// (probes placed while recording). A descriptor closed later is
// forgotten by the kernel.
func (p *Poller) Add(fds ...int) error {
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return os.NewSyscallError("epoll_ctl", err)
		}
	}
	return nil
}

// Wait blocks until a descriptor is readable or timeoutMS elapses. An
// interrupted wait is not an error.
func (p *Poller) Wait(timeoutMS int) error {
	_, err := unix.EpollWait(p.epfd, p.events, timeoutMS)
	if err == unix.EINTR {
		return nil
	}
	return os.NewSyscallError("epoll_wait", err)
}

// Close releases the epoll descriptor.
func (p *Poller) Close() error { return unix.Close(p.epfd) }

// Now returns CLOCK_MONOTONIC in nanoseconds: the clock of the events'
// timestamps (SamplingAttr sets use_clockid).
func Now() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// Close closes an event descriptor.
func Close(fd int) error { return unix.Close(fd) }

// Wakeup is an eventfd one goroutine signals to wake another's Poller:
// readable from the first Signal until Clear.
type Wakeup struct{ fd int }

// NewWakeup returns a cleared Wakeup.
func NewWakeup() (*Wakeup, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	return &Wakeup{fd: fd}, nil
}

// Fd is the descriptor to give NewPoller.
func (w *Wakeup) Fd() int { return w.fd }

// Signal makes the Wakeup readable. Signals before a Clear add up to one.
func (w *Wakeup) Signal() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(w.fd, one[:])
}

// Clear makes the Wakeup unreadable until the next Signal.
func (w *Wakeup) Clear() {
	var b [8]byte
	unix.Read(w.fd, b[:])
}

// Close releases the eventfd.
func (w *Wakeup) Close() error { return unix.Close(w.fd) }

package perf

import (
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
	for _, fd := range fds {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(epfd)
			return nil, os.NewSyscallError("epoll_ctl", err)
		}
	}
	return &Poller{epfd: epfd, events: make([]unix.EpollEvent, len(fds)+1)}, nil
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

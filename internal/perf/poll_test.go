package perf

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPollerDropsHungUp checks that a descriptor reporting a hang-up
// leaves the set after one wait while a live one stays: a hung-up
// descriptor left in it would wake every later wait at once.
func TestPollerDropsHungUp(t *testing.T) {
	var hung, live [2]int
	for _, p := range []*[2]int{&hung, &live} {
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
	}
	defer unix.Close(hung[0])
	defer unix.Close(live[0])
	defer unix.Close(live[1])
	p, err := NewPoller([]int{hung[0], live[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	unix.Close(hung[1]) // the read end now reports EPOLLHUP
	if err := p.Wait(-1); err != nil {
		t.Fatal(err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, hung[0], &ev); !errors.Is(err, unix.ENOENT) {
		t.Errorf("hung-up descriptor: EPOLL_CTL_MOD gave %v, want ENOENT (still in the set)", err)
	}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, live[0], &ev); err != nil {
		t.Errorf("live descriptor: EPOLL_CTL_MOD gave %v, want it still in the set", err)
	}
}

package perf

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CounterSampleType is the PERF_SAMPLE_* set of CounterAttr's events:
// which event (its id, so that several can share a ring) and the thread,
// nothing more: a burst of page faults writes a sample for each, and
// small samples, 24 bytes, make a ring last longer.
const CounterSampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID

// CounterOptions select how a per-thread counter is configured.
type CounterOptions struct {
	// Kernel counts events in kernel mode too: page faults the kernel
	// takes on user memory (in read(2), say) are the thread's.
	Kernel bool
	// EnableOnExec starts counting when the target calls exec.
	EnableOnExec bool
	// Watermark is the number of ring bytes that wake the reader; 0 wakes
	// on every record.
	Watermark uint32
}

// CounterAttr returns the attributes of a per-thread counter of ev, a
// software event such as page-faults or cpu-migrations: a sample of
// CounterSampleType for every occurrence, in the thread the event is
// opened on and, inherited, in every thread and process it creates.
// The number of a thread's samples is its count, exact whether the
// thread has exited or not.
//
// Counting events would cost nothing per occurrence, but their
// per-thread values are only reported (PERF_RECORD_READ with
// inherit_stat) when an inheriting thread exits, and only right if the
// kernel never swaps two threads' event contexts on a context switch;
// stopping that makes every context switch of the target slower
// (docs/recording.md has the measurements). Page faults and migrations
// are rare next to context switches.
func CounterAttr(ev Event, o CounterOptions) *unix.PerfEventAttr {
	a := &unix.PerfEventAttr{
		Type:        ev.Type,
		Config:      ev.Config,
		Sample:      1,
		Sample_type: CounterSampleType,
		Clockid:     unix.CLOCK_MONOTONIC,
		Bits: unix.PerfBitDisabled | unix.PerfBitInherit | unix.PerfBitExcludeHv |
			unix.PerfBitSampleIDAll | unix.PerfBitUseClockID,
	}
	a.Size = uint32(unsafe.Sizeof(*a))
	if !o.Kernel {
		a.Bits |= unix.PerfBitExcludeKernel
	}
	if o.EnableOnExec {
		a.Bits |= unix.PerfBitEnableOnExec
	}
	setWakeup(a, o.Watermark)
	return a
}

// EventID returns the kernel's id of event fd, which the samples of
// events with PERF_SAMPLE_IDENTIFIER carry.
func EventID(fd int) (uint64, error) {
	var id uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id)))
	if errno != 0 {
		return 0, os.NewSyscallError("ioctl PERF_EVENT_IOC_ID", errno)
	}
	return id, nil
}

package perf

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CounterReadFormat is the read_format of CounterAttr's events: read(2)
// and PERF_RECORD_READ give the value followed by the event id, which
// says which counter (and which CPU's event) a RecordRead belongs to.
const CounterReadFormat = unix.PERF_FORMAT_ID

// counterSampleType gives a counter's records the sample_id trailer of
// SampleType (pid/tid, time, cpu): the fields a trailer can hold are the
// same, so both decode with the sampling event's type.
const counterSampleType = unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU

// counterNeverSamples is the sample period of a counter that keeps its
// values with its thread: a period no counter reaches, so no sample is
// ever written.
const counterNeverSamples = 1 << 62

// CounterOptions select how a per-thread counter is configured.
type CounterOptions struct {
	// Kernel counts events in kernel mode too: page faults the kernel
	// takes on user memory (in read(2), say) are the thread's.
	Kernel bool
	// EnableOnExec starts counting when the target calls exec.
	EnableOnExec bool
	// KeepWithThread stops the kernel from moving the counter between
	// threads. Inherited events live in a per-thread context that the
	// kernel may swap with another thread's on a context switch (with
	// inherit_stat it swaps the values too, so exiting children still
	// report their own); the context holding the descriptor's event then
	// belongs to a thread that reports nothing at exit. A sampling event
	// with PERF_SAMPLE_READ and inherit forbids the swap (Linux 6.12);
	// older kernels reject it with EINVAL.
	KeepWithThread bool
}

// CounterAttr returns the attributes of a per-thread counter of ev (a
// software event such as page-faults or cpu-migrations): disabled,
// inherited by new threads and processes, and with inherit_stat, so
// that each inherited copy writes a RecordRead with its own thread's
// value when that thread exits (into the ring of the descriptor's event,
// or the one SetOutput names, which may be a sampling event's ring: the
// records decode with SamplingAttr's sample type).
func CounterAttr(ev Event, o CounterOptions) *unix.PerfEventAttr {
	a := &unix.PerfEventAttr{
		Type:        ev.Type,
		Config:      ev.Config,
		Sample_type: counterSampleType,
		Read_format: CounterReadFormat,
		Clockid:     unix.CLOCK_MONOTONIC,
		Bits: unix.PerfBitDisabled | unix.PerfBitInherit | unix.PerfBitInheritStat |
			unix.PerfBitExcludeHv | unix.PerfBitSampleIDAll | unix.PerfBitUseClockID,
	}
	a.Size = uint32(unsafe.Sizeof(*a))
	if !o.Kernel {
		a.Bits |= unix.PerfBitExcludeKernel
	}
	if o.EnableOnExec {
		a.Bits |= unix.PerfBitEnableOnExec
	}
	if o.KeepWithThread {
		a.Sample = counterNeverSamples
		a.Sample_type |= unix.PERF_SAMPLE_READ
	}
	return a
}

// EventID returns the kernel's id of event fd, the id RecordRead and
// ReadCounter report.
func EventID(fd int) (uint64, error) {
	var id uint64
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id)))
	if errno != 0 {
		return 0, os.NewSyscallError("ioctl PERF_EVENT_IOC_ID", errno)
	}
	return id, nil
}

// ReadCounter reads a CounterAttr event: the count of the thread it was
// opened on plus that of every thread that inherited it, exited or not.
func ReadCounter(fd int) (value, id uint64, err error) {
	var b [16]byte
	n, err := unix.Read(fd, b[:])
	if err != nil {
		return 0, 0, os.NewSyscallError("read perf counter", err)
	}
	if n != len(b) {
		return 0, 0, fmt.Errorf("read perf counter: %d bytes, want %d", n, len(b))
	}
	return le.Uint64(b[:]), le.Uint64(b[8:]), nil
}

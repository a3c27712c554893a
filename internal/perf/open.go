package perf

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SampleType is the PERF_SAMPLE_* set trueprof always requests; Decode
// relies on this layout, optionally followed by SampleUserRegs.
const SampleType = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME |
	unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_CALLCHAIN

// SampleUserRegs adds the user registers and the top of the user stack to
// each sample (SamplingOptions.UserStack).
const SampleUserRegs = unix.PERF_SAMPLE_REGS_USER | unix.PERF_SAMPLE_STACK_USER

// UserRegsMask selects the user registers a sample carries, in this order
// (enum perf_event_x86_regs): BP, SP, IP.
const UserRegsMask = 1<<6 | 1<<7 | 1<<8

// perfBitBuildID is attr.build_id (bit 34, Linux 5.12): MMAP2 records carry
// the mapped file's build id instead of its device and inode. x/sys/unix
// does not name it.
const perfBitBuildID = 1 << 34

// SamplingOptions selects how a sampling event is configured.
type SamplingOptions struct {
	Freq   uint64 // samples per second; used when Period is 0
	Period uint64 // events per sample
	// Kernel includes kernel samples and kernel call chains. Without it
	// only user space is sampled (what perf_event_paranoid=2 permits).
	Kernel bool
	// Side records (mmap2, comm, fork/exit) describe the target's modules
	// and threads.
	SideRecords bool
	// EnableOnExec starts counting when the target calls exec, so a
	// launcher's own work is never sampled.
	EnableOnExec bool
	// Inherit follows threads and processes the target creates later.
	Inherit bool
	// Watermark is the number of ring bytes that wake the reader; 0 wakes
	// on every record.
	Watermark uint32
	// BuildID asks for build ids in MMAP2 records (Linux 5.12).
	BuildID bool
	// MaxStack bounds call chain length; 0 keeps the kernel default (127).
	MaxStack uint16
	// ContextSwitch adds a record each time a sampled thread goes on or
	// off a CPU (PERF_RECORD_SWITCH): per-thread CPU time and dispatch
	// counts without a system call per event.
	ContextSwitch bool
	// UserStack is how many bytes of the user stack (from the stack
	// pointer up) each sample copies, with the user BP, SP and IP. They let
	// the recorder find the caller of a function sampled before its frame
	// exists (frameless leaves, prologues, epilogues), or unwind the whole
	// stack with its CFI. It is rounded down to a multiple of 8 and to
	// MaxUserStack. 0 disables it.
	UserStack uint32
	// ExcludeCallchainUser leaves the user part out of the kernel's call
	// chain, for recorders that unwind the user stack copy themselves.
	ExcludeCallchainUser bool
	// CountLost has the kernel count the records it could not write to
	// the event's ring (ReadLost), where it can (LostSupported).
	CountLost bool
}

// MaxUserStack is the largest user stack copy a sample can carry: a
// record's size is 16 bits, and perf's tools stop at this size too.
const MaxUserStack = 65528

// SamplingAttr returns the attributes of a sampling event: timestamps on
// CLOCK_MONOTONIC (the clock of jitdump files and of trueprof's records),
// frame-pointer call chains, and side records with sample_id_all so they
// carry pid/tid/time/cpu too.
func SamplingAttr(ev Event, o SamplingOptions) *unix.PerfEventAttr {
	a := &unix.PerfEventAttr{
		Type:        ev.Type,
		Config:      ev.Config,
		Sample_type: SampleType,
		Clockid:     unix.CLOCK_MONOTONIC,
		Bits:        unix.PerfBitDisabled | unix.PerfBitExcludeHv | unix.PerfBitSampleIDAll | unix.PerfBitUseClockID,
	}
	a.Size = uint32(unsafe.Sizeof(*a))
	if o.Period > 0 {
		a.Sample = o.Period
	} else {
		a.Sample = o.Freq
		a.Bits |= unix.PerfBitFreq
	}
	if !o.Kernel {
		a.Bits |= unix.PerfBitExcludeKernel | unix.PerfBitExcludeCallchainKernel
	}
	if o.SideRecords {
		a.Bits |= unix.PerfBitMmap | unix.PerfBitMmap2 | unix.PerfBitComm | unix.PerfBitCommExec | unix.PerfBitTask
	}
	if o.EnableOnExec {
		a.Bits |= unix.PerfBitEnableOnExec
	}
	if o.Inherit {
		a.Bits |= unix.PerfBitInherit
	}
	setWakeup(a, o.Watermark)
	if o.BuildID {
		a.Bits |= perfBitBuildID
	}
	if o.ContextSwitch {
		a.Bits |= unix.PerfBitContextSwitch
	}
	a.Sample_max_stack = o.MaxStack
	if o.UserStack > 0 {
		a.Sample_type |= SampleUserRegs
		a.Sample_regs_user = UserRegsMask
		a.Sample_stack_user = min(o.UserStack, MaxUserStack) &^ 7
	}
	if o.ExcludeCallchainUser {
		a.Bits |= unix.PerfBitExcludeCallchainUser
	}
	if o.CountLost && LostSupported() {
		a.Read_format |= formatLost
	}
	return a
}

// RingAttr returns the attributes of an event that only holds a ring for
// others: a dummy software event, disabled, that writes nothing itself,
// to be opened on one CPU for every task (pid -1) and mapped, so that
// per-task events of that CPU send their records to its ring
// (SetOutput). Its ring can be mapped before the tasks exist, and it is
// not a per-task event: the kernel's first per-task event after a second
// without any waits for an RCU grace period (perf_sched_events), 8-19 ms
// here, which a ring owner does not wait for. Its clock is the sampling
// events' (the kernel refuses to mix clocks in a ring), and watermark
// bytes wake the ring's reader. Enabled with the others (an attached
// process's events are enabled together), it still writes nothing: it
// asks for no record.
func RingAttr(watermark uint32) *unix.PerfEventAttr {
	a := &unix.PerfEventAttr{
		Type:    unix.PERF_TYPE_SOFTWARE,
		Config:  unix.PERF_COUNT_SW_DUMMY,
		Clockid: unix.CLOCK_MONOTONIC,
		Bits:    unix.PerfBitDisabled | unix.PerfBitExcludeHv | unix.PerfBitUseClockID,
	}
	a.Size = uint32(unsafe.Sizeof(*a))
	setWakeup(a, watermark)
	return a
}

// setWakeup makes a ring wake its reader once watermark bytes are
// waiting, or on every record if watermark is 0.
func setWakeup(a *unix.PerfEventAttr, watermark uint32) {
	if watermark > 0 {
		a.Bits |= unix.PerfBitWatermark
		a.Wakeup = watermark
	} else {
		a.Wakeup = 1
	}
}

// FlagCloexec is PERF_FLAG_FD_CLOEXEC; trueprof always passes it so event
// descriptors never leak into the launched target.
const FlagCloexec = unix.PERF_FLAG_FD_CLOEXEC

// ErrNotSupported is wrapped by Open when the machine cannot count the
// event at all (for example hardware events in a VM without a PMU).
var ErrNotSupported = errors.New("not supported")

// ErrPermission is wrapped by Open when the kernel refused for lack of
// privilege; the message names the capability or sysctl.
var ErrPermission = errors.New("permission denied")

// Open opens one perf event on pid (-1: every process) and cpu (-1: every
// CPU). The returned descriptor is close-on-exec. Errors say what is
// missing.
func Open(a *unix.PerfEventAttr, pid, cpu int, flags int) (int, error) {
	fd, err := unix.PerfEventOpen(a, pid, cpu, -1, flags|FlagCloexec)
	if err == nil {
		return fd, nil
	}
	return -1, explain(a, pid, err)
}

// explain turns perf_event_open's errno into something a user can act on.
func explain(a *unix.PerfEventAttr, pid int, err error) error {
	sys := os.NewSyscallError("perf_event_open", err)
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		p := Paranoid()
		kernel := a.Bits&unix.PerfBitExcludeKernel == 0
		switch {
		case a.Type == unix.PERF_TYPE_TRACEPOINT && pid == -1:
			return fmt.Errorf("%w: tracing every task of a CPU needs CAP_PERFMON (or CAP_SYS_ADMIN) or kernel.perf_event_paranoid = -1 (it is %d): %w", ErrPermission, p, sys)
		case kernel && p >= 2:
			return fmt.Errorf("%w: kernel sampling needs CAP_PERFMON (or CAP_SYS_ADMIN) or kernel.perf_event_paranoid <= 1 (it is %d): %w", ErrPermission, p, sys)
		case p >= 3:
			return fmt.Errorf("%w: kernel.perf_event_paranoid is %d, which forbids all perf events without CAP_PERFMON: %w", ErrPermission, p, sys)
		default:
			return fmt.Errorf("%w: profiling pid %d needs CAP_PERFMON or ptrace access to it (same user, kernel.yama.ptrace_scope): %w", ErrPermission, pid, sys)
		}
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENODEV):
		if a.Type == unix.PERF_TYPE_HARDWARE || a.Type == unix.PERF_TYPE_HW_CACHE {
			return fmt.Errorf("%w: this machine has no hardware PMU for this event (common in virtual machines); use a software event such as cpu-clock: %w", ErrNotSupported, sys)
		}
		return fmt.Errorf("%w: the kernel does not support this event: %w", ErrNotSupported, sys)
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("no process %d: %w", pid, sys)
	case errors.Is(err, unix.EMFILE):
		return fmt.Errorf("too many open files (raise ulimit -n): %w", sys)
	case errors.Is(err, unix.EINVAL) && a.Bits&unix.PerfBitFreq != 0:
		return fmt.Errorf("invalid event settings; is the frequency above kernel.perf_event_max_sample_rate (%s)? %w", readSysctl("kernel/perf_event_max_sample_rate"), sys)
	}
	return sys
}

// Paranoid returns kernel.perf_event_paranoid, or 2 (the common default)
// if it cannot be read.
func Paranoid() int {
	n, err := strconv.Atoi(readSysctl("kernel/perf_event_paranoid"))
	if err != nil {
		return 2
	}
	return n
}

func readSysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// Enable starts counting on an event opened disabled.
func Enable(fd int) error {
	return os.NewSyscallError("ioctl PERF_EVENT_IOC_ENABLE", unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0))
}

// Disable stops counting.
func Disable(fd int) error {
	return os.NewSyscallError("ioctl PERF_EVENT_IOC_DISABLE", unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0))
}

// SetOutput redirects fd's records into the ring of target, which must be
// on the same CPU; it saves one ring per event.
func SetOutput(fd, target int) error {
	return os.NewSyscallError("ioctl PERF_EVENT_IOC_SET_OUTPUT", unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, target))
}

// OnlineCPUs returns the CPUs listed in /sys/devices/system/cpu/online.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

// parseCPUList parses the kernel's cpu list syntax, e.g. "0-3,6".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("cpu list %q: bad range", s)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

package perf

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UprobeSampleType is the PERF_SAMPLE_* set of uprobe events opened with
// UprobeOptions.Sample: which event (its id), pid/tid and time.
const UprobeSampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME

// uprobeSysfs is the uprobe PMU's directory; tracefs is not needed.
const uprobeSysfs = "/sys/bus/event_source/devices/uprobe"

var uprobePMU struct {
	sync.Once
	typ    uint32
	retBit uint
	err    error
}

// UprobeType returns the perf event type of the uprobe PMU and the bit of
// attr.config that makes a return probe, both read from sysfs (the type
// differs between kernels). The error wraps ErrNotSupported when the
// kernel has no uprobe PMU (CONFIG_UPROBE_EVENTS).
func UprobeType() (typ uint32, retprobeBit uint, err error) {
	uprobePMU.Do(func() {
		uprobePMU.typ, uprobePMU.retBit, uprobePMU.err = readUprobePMU(uprobeSysfs)
	})
	return uprobePMU.typ, uprobePMU.retBit, uprobePMU.err
}

func readUprobePMU(dir string) (uint32, uint, error) {
	b, err := os.ReadFile(dir + "/type")
	if err != nil {
		return 0, 0, fmt.Errorf("%w: no uprobe PMU (%w); the kernel needs CONFIG_UPROBE_EVENTS", ErrNotSupported, err)
	}
	typ, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%s/type: %w", dir, err)
	}
	// format/retprobe reads "config:0" on every kernel so far.
	bit := uint(0)
	if b, err := os.ReadFile(dir + "/format/retprobe"); err == nil {
		bit, err = parseFormatBit(strings.TrimSpace(string(b)))
		if err != nil {
			return 0, 0, fmt.Errorf("%s/format/retprobe: %w", dir, err)
		}
	}
	return uint32(typ), bit, nil
}

// parseFormatBit parses a one-bit PMU format such as "config:0".
func parseFormatBit(s string) (uint, error) {
	v, ok := strings.CutPrefix(s, "config:")
	if !ok {
		return 0, fmt.Errorf("format %q: not a config bit", s)
	}
	n, err := strconv.ParseUint(v, 10, 6)
	if err != nil {
		return 0, fmt.Errorf("format %q: %w", s, err)
	}
	return uint(n), nil
}

// Uprobe names a probe point of the uprobe PMU.
type Uprobe struct {
	Path   string // the ELF file
	Offset uint64 // file offset of the probed instruction
	Return bool   // a return probe (uretprobe) of the function at Offset
}

// UprobeOptions select how a uprobe event is opened.
type UprobeOptions struct {
	// Sample writes a sample of UprobeSampleType per hit, with the time on
	// CLOCK_MONOTONIC; otherwise the event only counts hits (read(2) the
	// descriptor for a u64).
	Sample bool
	// Disabled opens the event disabled, for Enable later.
	Disabled bool
	// EnableOnExec starts counting when the target calls exec.
	EnableOnExec bool
	// Inherit follows threads and processes the target creates later.
	Inherit bool
	// Watermark is the number of ring bytes that wake the reader; 0 wakes
	// on every record.
	Watermark uint32
}

// UprobeAttr returns the attributes of a uprobe event. attr.Ext1 points
// into path, a NUL-terminated copy of u.Path that must stay alive until
// perf_event_open returns.
func UprobeAttr(u Uprobe, o UprobeOptions) (attr *unix.PerfEventAttr, path []byte, err error) {
	typ, retBit, err := UprobeType()
	if err != nil {
		return nil, nil, err
	}
	if strings.IndexByte(u.Path, 0) >= 0 || u.Path == "" {
		return nil, nil, fmt.Errorf("uprobe path %q: invalid", u.Path)
	}
	path = append([]byte(u.Path), 0)
	a := &unix.PerfEventAttr{
		Type:    typ,
		Ext1:    uint64(uintptr(unsafe.Pointer(&path[0]))), // config1: uprobe_path
		Ext2:    u.Offset,                                  // config2: probe_offset
		Clockid: unix.CLOCK_MONOTONIC,
		Bits:    unix.PerfBitUseClockID | unix.PerfBitSampleIDAll,
	}
	a.Size = uint32(unsafe.Sizeof(*a))
	if u.Return {
		a.Config |= 1 << retBit
	}
	if o.Sample {
		a.Sample = 1
		a.Sample_type = UprobeSampleType
		setWakeup(a, o.Watermark)
	}
	if o.Disabled {
		a.Bits |= unix.PerfBitDisabled
	}
	if o.EnableOnExec {
		a.Bits |= unix.PerfBitEnableOnExec
	}
	if o.Inherit {
		a.Bits |= unix.PerfBitInherit
	}
	return a, path, nil
}

// OpenUprobe opens a uprobe event on pid (-1: every process mapping the
// file) and cpu (-1: every CPU). The descriptor is close-on-exec. Errors
// say what is missing: the uprobe PMU needs CAP_PERFMON (or root).
func OpenUprobe(u Uprobe, pid, cpu int, o UprobeOptions) (int, error) {
	a, path, err := UprobeAttr(u, o)
	if err != nil {
		return -1, err
	}
	fd, err := unix.PerfEventOpen(a, pid, cpu, -1, FlagCloexec)
	runtime.KeepAlive(path)
	if err == nil {
		return fd, nil
	}
	sys := os.NewSyscallError("perf_event_open", err)
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return -1, fmt.Errorf("%w: uprobes need CAP_PERFMON (or CAP_SYS_ADMIN): %w", ErrPermission, sys)
	case errors.Is(err, unix.ENOENT):
		return -1, fmt.Errorf("uprobe on %s: no such file: %w", u.Path, sys)
	case errors.Is(err, unix.EINVAL):
		return -1, fmt.Errorf("uprobe on %s at offset %#x: rejected (not an instruction the kernel can probe, or past the end of the file): %w", u.Path, u.Offset, sys)
	}
	return -1, fmt.Errorf("uprobe on %s at offset %#x: %w", u.Path, u.Offset, explain(a, pid, err))
}

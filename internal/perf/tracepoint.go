package perf

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TracepointSampleType is the PERF_SAMPLE_* set of TracepointAttr's
// events: the task that was current, time, CPU and the tracepoint's
// fields. Its sample_id trailer is SampleType's.
const TracepointSampleType = unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_RAW

// Tracepoint is a kernel tracepoint: the id perf_event_open takes and the
// layout of the raw data its samples carry, both from tracefs.
type Tracepoint struct {
	System, Name string
	ID           uint64
	Fields       map[string]TracepointField
}

// TracepointField is where a field lies in a tracepoint's raw data.
type TracepointField struct {
	Offset, Size int
	Signed       bool
}

// Uint returns the field's value in raw, zero-extended; false if raw is
// too short or the field is not a 1, 2, 4 or 8 byte integer.
func (f TracepointField) Uint(raw []byte) (uint64, bool) {
	if f.Offset < 0 || f.Offset+f.Size > len(raw) {
		return 0, false
	}
	b := raw[f.Offset:]
	switch f.Size {
	case 1:
		return uint64(b[0]), true
	case 2:
		return uint64(le.Uint16(b)), true
	case 4:
		return uint64(le.Uint32(b)), true
	case 8:
		return le.Uint64(b), true
	}
	return 0, false
}

// LookupTracepoint reads the id and format of tracepoint system:name
// (e.g. "irq", "softirq_entry") from tracefs. When tracefs is not
// mounted it mounts a private instance that no path shows, as perf(1)
// mounts one where it is missing; that needs CAP_SYS_ADMIN. The error
// wraps ErrPermission or ErrNotSupported when the reason is one of those.
func LookupTracepoint(system, name string) (*Tracepoint, error) {
	if strings.ContainsAny(system+name, "/.") || system == "" || name == "" {
		return nil, fmt.Errorf("tracepoint %s:%s: invalid name", system, name)
	}
	t, err := tracefs()
	if err != nil {
		return nil, err
	}
	b, err := t.read("events/" + system + "/" + name + "/format")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: the kernel has no tracepoint %s:%s", ErrNotSupported, system, name)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("%w: reading tracepoint %s:%s needs root: %w", ErrPermission, system, name, err)
	case err != nil:
		return nil, err
	}
	tp, err := parseTracepointFormat(string(b))
	if err != nil {
		return nil, fmt.Errorf("tracepoint %s:%s: %w", system, name, err)
	}
	tp.System, tp.Name = system, name
	return tp, nil
}

// parseTracepointFormat parses a tracefs format file:
//
//	name: softirq_entry
//	ID: 223
//	format:
//		field:unsigned short common_type;	offset:0;	size:2;	signed:0;
//		...
func parseTracepointFormat(s string) (*Tracepoint, error) {
	tp := &Tracepoint{Fields: map[string]TracepointField{}}
	haveID := false
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "ID:"); ok {
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("format: id %q: %w", v, err)
			}
			tp.ID, haveID = id, true
			continue
		}
		if !strings.HasPrefix(line, "field:") {
			continue
		}
		var f TracepointField
		var name string
		for _, part := range strings.Split(line, ";") {
			k, v, _ := strings.Cut(strings.TrimSpace(part), ":")
			var err error
			switch k {
			case "field":
				// "unsigned int vec", "__data_loc char[] name", "char comm[16]"
				words := strings.Fields(v)
				if len(words) > 0 {
					name, _, _ = strings.Cut(words[len(words)-1], "[")
				}
			case "offset":
				f.Offset, err = strconv.Atoi(v)
			case "size":
				f.Size, err = strconv.Atoi(v)
			case "signed":
				f.Signed = v == "1"
			}
			if err != nil {
				return nil, fmt.Errorf("format: %q: %w", line, err)
			}
		}
		if name != "" {
			tp.Fields[name] = f
		}
	}
	if !haveID {
		return nil, errors.New("format: no ID line")
	}
	if _, ok := tp.Fields["common_type"]; !ok {
		return nil, errors.New("format: no common_type field")
	}
	return tp, nil
}

// TracepointOptions select how a tracepoint event is opened.
type TracepointOptions struct {
	// Disabled opens the event disabled, for Enable later.
	Disabled bool
	// Watermark is the number of ring bytes that wake the reader; 0 wakes
	// on every record.
	Watermark uint32
}

// TracepointAttr returns the attributes of an event that samples every
// hit of tp with TracepointSampleType, timed on CLOCK_MONOTONIC like
// SamplingAttr's events. Opened with pid -1 on a CPU, it sees every hit
// on that CPU, whichever task was current: that needs CAP_PERFMON (or
// root), as raw tracepoint data does anyway.
func TracepointAttr(tp *Tracepoint, o TracepointOptions) *unix.PerfEventAttr {
	a := &unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Config:      tp.ID,
		Sample:      1,
		Sample_type: TracepointSampleType,
		Clockid:     unix.CLOCK_MONOTONIC,
		Bits:        unix.PerfBitSampleIDAll | unix.PerfBitUseClockID,
	}
	a.Size = uint32(unsafe.Sizeof(*a))
	if o.Disabled {
		a.Bits |= unix.PerfBitDisabled
	}
	setWakeup(a, o.Watermark)
	return a
}

// SetFilter sets the filter of tracepoint event fd: an expression over
// its fields in tracefs's syntax ("common_pid != 0"), which the kernel
// evaluates before writing a sample, so what it drops costs no ring
// space.
func SetFilter(fd int, filter string) error {
	b, err := unix.BytePtrFromString(filter)
	if err != nil {
		return err
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_SET_FILTER, uintptr(unsafe.Pointer(b)))
	if errno != 0 {
		return os.NewSyscallError("ioctl PERF_EVENT_IOC_SET_FILTER", errno)
	}
	return nil
}

// tracefsDirs are where tracefs is usually mounted, tried after the
// mounts /proc/self/mountinfo lists.
var tracefsDirs = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// tracefsRoot is a tracefs instance: a mounted directory, or the
// descriptor of a private mount.
type tracefsRoot struct {
	dir string
	fd  int
}

func (t *tracefsRoot) read(rel string) ([]byte, error) {
	if t.dir != "" {
		return os.ReadFile(t.dir + "/" + rel)
	}
	fd, err := unix.Openat(t.fd, rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "tracefs/" + rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), "tracefs/"+rel)
	defer f.Close()
	return io.ReadAll(f)
}

var tracefsOnce struct {
	sync.Once
	root *tracefsRoot
	err  error
}

// tracefs finds tracefs once per process. A private mount stays open
// (one descriptor) for later lookups; nothing else sees it.
func tracefs() (*tracefsRoot, error) {
	tracefsOnce.Do(func() {
		for _, dir := range append(tracefsMounts(), tracefsDirs...) {
			st, err := os.Stat(dir + "/events")
			if err == nil && st.IsDir() {
				tracefsOnce.root = &tracefsRoot{dir: dir}
				return
			}
			if errors.Is(err, fs.ErrPermission) {
				// Mounted, but only root may look (mode 0700).
				tracefsOnce.err = fmt.Errorf("%w: reading tracefs needs root: %w", ErrPermission, err)
				return
			}
		}
		fd, err := mountTracefs()
		if err != nil {
			tracefsOnce.err = err
			return
		}
		tracefsOnce.root = &tracefsRoot{fd: fd}
	})
	return tracefsOnce.root, tracefsOnce.err
}

// tracefsMounts lists the mount points of tracefs in this process's
// mount namespace.
func tracefsMounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var dirs []string
	for _, line := range strings.Split(string(b), "\n") {
		// "id parent maj:min root mountpoint options ... - fstype source superopts"
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && g[0] == "tracefs" {
			dirs = append(dirs, unescapeMountinfo(f[4]))
		}
	}
	return dirs
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountTracefs creates a tracefs mount attached to no path (fsopen and
// fsmount, Linux 5.2) and returns its descriptor: the machine's mounts
// stay as they were, and the mount goes away with the descriptor.
func mountTracefs() (int, error) {
	hint := "tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)"
	fsfd, err := unix.Fsopen("tracefs", unix.FSOPEN_CLOEXEC)
	if err == nil {
		defer unix.Close(fsfd)
		err = unix.FsconfigCreate(fsfd)
	}
	var mfd int
	if err == nil {
		mfd, err = unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	}
	switch {
	case err == nil:
		return mfd, nil
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return -1, fmt.Errorf("%w: %s, and mounting it privately needs CAP_SYS_ADMIN: %w", ErrPermission, hint, os.NewSyscallError("fsopen", err))
	}
	return -1, fmt.Errorf("%w: %s: %w", ErrNotSupported, hint, os.NewSyscallError("fsopen", err))
}

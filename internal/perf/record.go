package perf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// le is the byte order of perf records: the host's, little endian on the
// architectures trueprof supports.
var le = binary.LittleEndian

// headerSize is sizeof(struct perf_event_header).
const headerSize = 8

// Record types (PERF_RECORD_*) that Decode understands.
const (
	RecordMmap        = unix.PERF_RECORD_MMAP
	RecordLost        = unix.PERF_RECORD_LOST
	RecordComm        = unix.PERF_RECORD_COMM
	RecordExit        = unix.PERF_RECORD_EXIT
	RecordThrottle    = unix.PERF_RECORD_THROTTLE
	RecordUnthrottle  = unix.PERF_RECORD_UNTHROTTLE
	RecordFork        = unix.PERF_RECORD_FORK
	RecordSample      = unix.PERF_RECORD_SAMPLE
	RecordMmap2       = unix.PERF_RECORD_MMAP2
	RecordLostSamples = unix.PERF_RECORD_LOST_SAMPLES
	RecordSwitch      = unix.PERF_RECORD_SWITCH
)

// Callchain context markers: entries at or above ContextMax are not
// addresses but say whose addresses follow (PERF_CONTEXT_KERNEL, ...).
const (
	ContextKernel = uint64(1<<64 + unix.PERF_CONTEXT_KERNEL)
	ContextUser   = uint64(1<<64 + unix.PERF_CONTEXT_USER)
	ContextMax    = uint64(1<<64 + unix.PERF_CONTEXT_MAX)
)

// ErrMalformed is returned by Decode for a record shorter than its type
// requires.
var ErrMalformed = errors.New("malformed perf record")

// Record is one decoded ring-buffer record. Which fields are set depends
// on Type; the sample_id fields (PID, TID, Time, CPU) are set for every
// type because trueprof opens events with sample_id_all.
type Record struct {
	Type uint32
	Misc uint16

	PID, TID uint32
	Time     uint64
	CPU      uint32

	// RecordSample.
	IP        uint64
	Period    uint64
	Callchain []uint64 // a copy; includes the context markers
	// UserRegs are the user BP, SP and IP (UserRegsMask) when the sample
	// has them (UserABI != 0); UserStack is a copy of the user stack from
	// SP up.
	UserABI   uint64
	UserRegs  [3]uint64
	UserStack []byte
	// UserStackSize is the size of the copy the kernel meant to take;
	// UserStack is shorter when the copy reached the end of the stack
	// mapping, so nothing above it is stack.
	UserStackSize uint64

	// RecordMmap2 and RecordMmap.
	Addr, Len, PgOff uint64
	Prot, Flags      uint32
	BuildID          []byte
	Filename         string

	// RecordComm.
	Comm string

	// RecordFork and RecordExit (PID/TID above are the child's).
	PPID, PTID uint32

	// RecordLost and RecordLostSamples.
	Lost uint64

	// ID is the event's id (PERF_EVENT_IOC_ID) in records of events with
	// PERF_SAMPLE_IDENTIFIER: which of the events sharing a ring wrote it.
	ID uint64

	// Raw is a copy of a sample's PERF_SAMPLE_RAW data: a tracepoint's
	// fields (Tracepoint.Fields).
	Raw []byte
}

// Exec reports whether a RecordComm was caused by exec.
func (r *Record) Exec() bool { return r.Misc&unix.PERF_RECORD_MISC_COMM_EXEC != 0 }

// SwitchOut reports whether a RecordSwitch is a switch out of the CPU,
// and Preempted whether that was involuntary (the thread was runnable).
func (r *Record) SwitchOut() bool { return r.Misc&unix.PERF_RECORD_MISC_SWITCH_OUT != 0 }

// Preempted reports whether a switch-out was a preemption.
func (r *Record) Preempted() bool { return r.Misc&unix.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0 }

// KernelIP reports whether a sample's IP is in the kernel.
func (r *Record) KernelIP() bool {
	return r.Misc&unix.PERF_RECORD_MISC_CPUMODE_MASK == unix.PERF_RECORD_MISC_KERNEL
}

// decoder reads fields in order and remembers the first short read, like
// debug/dwarf's buf.
type decoder struct {
	b   []byte
	err error
	// st is the events' PERF_SAMPLE_* set.
	st uint64
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.err = ErrMalformed
		d.b = nil
		return 0
	}
	v := le.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) u32() uint32 {
	if len(d.b) < 4 {
		d.err = ErrMalformed
		d.b = nil
		return 0
	}
	v := le.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) bytes(n int) []byte {
	if n < 0 || len(d.b) < n {
		d.err = ErrMalformed
		d.b = nil
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// cstring reads a NUL-terminated string padded to 8 bytes.
func (d *decoder) cstring() string {
	i := bytes.IndexByte(d.b, 0)
	if i < 0 {
		d.err = ErrMalformed
		d.b = nil
		return ""
	}
	s := string(d.b[:i])
	n := (i + 8) &^ 7
	if n > len(d.b) {
		n = len(d.b)
	}
	d.b = d.b[n:]
	return s
}

// taskTimeCPU reads the fields that samples and sample_id trailers share,
// those of them the events have: {pid, tid}, time, {cpu, res}.
func (d *decoder) taskTimeCPU(r *Record) {
	if d.st&unix.PERF_SAMPLE_TID != 0 {
		r.PID, r.TID = d.u32(), d.u32()
	}
	if d.st&unix.PERF_SAMPLE_TIME != 0 {
		r.Time = d.u64()
	}
	if d.st&unix.PERF_SAMPLE_CPU != 0 {
		r.CPU = d.u32()
		d.u32()
	}
}

// sampleID reads the sample_id trailer: pid/tid, time and cpu, then the
// identifier.
func (d *decoder) sampleID(r *Record) {
	d.taskTimeCPU(r)
	if d.st&unix.PERF_SAMPLE_IDENTIFIER != 0 {
		r.ID = d.u64()
	}
}

// maxCallchain bounds a decoded call chain so a corrupt count cannot size
// an allocation; the kernel's own limit is 127 plus context markers.
const maxCallchain = 4096

// RecordHeader returns the type and the size of the record at the start
// of b (struct perf_event_header), ok false when b is shorter than the
// header.
func RecordHeader(b []byte) (typ uint32, size int, ok bool) {
	if len(b) < headerSize {
		return 0, 0, false
	}
	return le.Uint32(b), int(le.Uint16(b[6:])), true
}

// Decode decodes rec, a record of an event opened with sample_id_all and
// sampleType, into r. sampleType may hold IDENTIFIER, IP, TID, TIME, CPU,
// PERIOD, CALLCHAIN, RAW, REGS_USER (UserRegsMask) and STACK_USER: the
// sets of SamplingAttr, CounterAttr and TracepointAttr. Unknown record
// types decode only their header.
func Decode(rec []byte, sampleType uint64, r *Record) error {
	return DecodeStack(rec, sampleType, r, nil)
}

// DecodeStack is Decode with the user stack copied into stack[:0] when
// it fits, so a reader can reuse its buffers (8 KiB per sample would
// otherwise be new garbage at every sample).
func DecodeStack(rec []byte, sampleType uint64, r *Record, stack []byte) error {
	if len(rec) < headerSize {
		return ErrMalformed
	}
	*r = Record{Type: le.Uint32(rec), Misc: le.Uint16(rec[4:])}
	d := decoder{b: rec[headerSize:], st: sampleType}
	switch r.Type {
	case RecordSample:
		// The fields come in the order of their PERF_SAMPLE_* bits.
		if sampleType&unix.PERF_SAMPLE_IDENTIFIER != 0 {
			r.ID = d.u64()
		}
		if sampleType&unix.PERF_SAMPLE_IP != 0 {
			r.IP = d.u64()
		}
		d.taskTimeCPU(r)
		if sampleType&unix.PERF_SAMPLE_PERIOD != 0 {
			r.Period = d.u64()
		}
		if sampleType&unix.PERF_SAMPLE_CALLCHAIN != 0 {
			n := d.u64()
			if n > maxCallchain || n*8 > uint64(len(d.b)) {
				return fmt.Errorf("%w: call chain of %d entries", ErrMalformed, n)
			}
			r.Callchain = make([]uint64, n)
			for i := range r.Callchain {
				r.Callchain[i] = d.u64()
			}
		}
		if sampleType&unix.PERF_SAMPLE_RAW != 0 {
			// u32 size; char data[size], padded so the two end on 8 bytes.
			n := d.u32()
			if raw := d.bytes(int(n)); d.err == nil {
				r.Raw = append([]byte(nil), raw...)
			}
		}
		if sampleType&unix.PERF_SAMPLE_REGS_USER != 0 {
			// u64 abi; u64 regs[weight(mask)] unless abi is NONE (a
			// kernel thread has no user registers).
			if r.UserABI = d.u64(); r.UserABI != 0 {
				for i := range r.UserRegs {
					r.UserRegs[i] = d.u64()
				}
			}
		}
		if sampleType&unix.PERF_SAMPLE_STACK_USER != 0 {
			// u64 size; char data[size]; u64 dyn_size (if size != 0).
			size := d.u64()
			if size > uint64(len(d.b)) {
				return fmt.Errorf("%w: user stack of %d bytes", ErrMalformed, size)
			}
			data := d.bytes(int(size))
			r.UserStackSize = size
			if size > 0 {
				if dyn := d.u64(); dyn < size {
					data = data[:dyn]
				}
				r.UserStack = append(stack[:0], data...)
			}
		}
	case RecordMmap2:
		r.PID, r.TID = d.u32(), d.u32()
		r.Addr, r.Len, r.PgOff = d.u64(), d.u64(), d.u64()
		if r.Misc&unix.PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
			// u8 build_id_size, u8 + u16 reserved, u8 build_id[20].
			id := d.bytes(24)
			if d.err == nil && id[0] <= 20 {
				r.BuildID = append([]byte(nil), id[4:4+id[0]]...)
			}
		} else {
			d.bytes(24) // maj, min, ino, ino_generation
		}
		r.Prot, r.Flags = d.u32(), d.u32()
		r.Filename = d.cstring()
		d.sampleID(r)
	case RecordMmap:
		r.PID, r.TID = d.u32(), d.u32()
		r.Addr, r.Len, r.PgOff = d.u64(), d.u64(), d.u64()
		r.Prot = unix.PROT_EXEC
		r.Filename = d.cstring()
		d.sampleID(r)
	case RecordComm:
		r.PID, r.TID = d.u32(), d.u32()
		r.Comm = d.cstring()
		d.sampleID(r)
	case RecordFork, RecordExit:
		pid, ppid := d.u32(), d.u32()
		tid, ptid := d.u32(), d.u32()
		t := d.u64()
		// The trailer describes the task that ran (the parent of a fork);
		// the record's own fields describe the child.
		d.sampleID(r)
		r.PID, r.PPID, r.TID, r.PTID, r.Time = pid, ppid, tid, ptid, t
	case RecordLost:
		d.u64() // id
		r.Lost = d.u64()
		d.sampleID(r)
	case RecordLostSamples:
		r.Lost = d.u64()
		d.sampleID(r)
	case RecordSwitch:
		d.sampleID(r)
	case RecordThrottle, RecordUnthrottle:
		t := d.u64()
		d.u64() // id
		d.u64() // stream_id
		d.sampleID(r)
		r.Time = t
	}
	if d.err != nil {
		return fmt.Errorf("record type %d of %d bytes: %w", r.Type, len(rec), d.err)
	}
	return nil
}

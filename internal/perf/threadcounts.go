package perf

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// ThreadCounts counts software events (page faults, CPU migrations) per
// thread incarnation in the kernel. A BPF program attached to each
// counter event (CounterAttr, period 1, inherited) runs at every
// occurrence, in the thread that caused it, adds one to that thread's
// entry of a hash map and returns 0, which tells the kernel to write
// nothing to any ring: a thread costs one map entry however many events
// it has, and the events cost the target no ring record.
//
// Entries are keyed by ThreadKey, so that a thread id reused by a new
// thread starts a new entry while the old one waits to be read.
type ThreadCounts struct {
	kinds   int
	progs   []*ebpf.Program // by kind
	counts  *ebpf.Map       // BPF_MAP_TYPE_HASH: ThreadKey -> [kinds]uint64
	dropped *ebpf.Map       // BPF_MAP_TYPE_PERCPU_ARRAY[1]: increments with no room in counts
}

// ThreadKey names a thread incarnation: its ids and its start time
// (task_struct.start_time, CLOCK_MONOTONIC ns, the clock of the records).
type ThreadKey struct {
	TID, PID uint32
	Start    uint64
}

// ErrNoBPF is wrapped by NewThreadCounts when the kernel or the
// permissions do not allow BPF counting.
var ErrNoBPF = errors.New("BPF per-thread counting not available")

// ThreadCountsEntries bounds the threads with entries at once: the live
// ones that had an event, and the ended ones not yet read. Entries are
// allocated when first used (BPF_F_NO_PREALLOC), so the bound costs no
// memory.
const ThreadCountsEntries = 1 << 18

// NewThreadCounts loads the programs and maps counting kinds kinds of
// events per thread.
func NewThreadCounts(kinds int) (*ThreadCounts, error) {
	start, err := taskStartOffset()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBPF, err)
	}
	tc := &ThreadCounts{kinds: kinds}
	fail := func(what string, err error) (*ThreadCounts, error) {
		tc.Close()
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%w: %s needs CAP_BPF and CAP_PERFMON (or root): %w", ErrNoBPF, what, err)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrNoBPF, what, err)
	}
	tc.counts, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "tp_thread_cnt",
		Type:       ebpf.Hash,
		KeySize:    uint32(unsafe.Sizeof(ThreadKey{})),
		ValueSize:  uint32(8 * kinds),
		MaxEntries: ThreadCountsEntries,
		Flags:      unix.BPF_F_NO_PREALLOC,
	})
	if err != nil {
		return fail("creating the counts map", err)
	}
	tc.dropped, err = ebpf.NewMap(&ebpf.MapSpec{Name: "tp_cnt_dropped", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fail("creating the drop counter", err)
	}
	for kind := range kinds {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         fmt.Sprintf("tp_count%d", kind),
			Type:         ebpf.PerfEvent,
			Instructions: countProgram(tc.counts.FD(), tc.dropped.FD(), kind, kinds, start),
			License:      "GPL", // bpf_probe_read_kernel, bpf_get_current_task
		})
		if err != nil {
			return fail("loading the counting program", err)
		}
		tc.progs = append(tc.progs, prog)
	}
	return tc, nil
}

// taskStartOffset is the offset of start_time in the kernel's
// task_struct, from the kernel's BTF.
func taskStartOffset() (int32, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, fmt.Errorf("reading the kernel's BTF: %w", err)
	}
	var task *btf.Struct
	if err := spec.TypeByName("task_struct", &task); err != nil {
		return 0, fmt.Errorf("kernel BTF: %w", err)
	}
	for _, m := range task.Members {
		if m.Name == "start_time" && m.Offset%8 == 0 {
			return int32(m.Offset / 8), nil
		}
	}
	return 0, errors.New("kernel BTF: task_struct has no start_time")
}

// countProgram adds one to value[kind] of the current thread's entry,
// creating it if needed; an entry that cannot be created adds one to
// the drop counter instead. It never asks for a sample to be written.
//
// Stack: key (ThreadKey) at fp-16, value ([kinds]uint64) below it, the
// drop counter's index (u32 0) at fp-4 once the key is no longer needed.
func countProgram(counts, dropped, kind, kinds int, startOffset int32) asm.Instructions {
	const key = -16
	value := int16(key - 8*kinds)
	insns := asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, key, asm.R0, asm.DWord), // TID, then PID (the tgid)
		asm.FnGetCurrentTask.Call(),
		asm.Mov.Reg(asm.R3, asm.R0),
		asm.Add.Imm(asm.R3, startOffset),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, key+8),
		asm.Mov.Imm(asm.R2, 8),
		asm.FnProbeReadKernel.Call(), // Start; zeroed if unreadable
		asm.LoadMapPtr(asm.R1, counts),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "insert"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 8*int16(kind)), // value[kind] of the entry found
		asm.Ja.Label("exit"),
	}
	// The thread's first event: a value of zeros but this kind's one.
	for i := range kinds {
		v := int32(0)
		if i == kind {
			v = 1
		}
		mov := asm.Mov.Imm(asm.R1, v)
		if i == 0 {
			mov = mov.WithSymbol("insert")
		}
		insns = append(insns, mov, asm.StoreMem(asm.RFP, value+int16(8*i), asm.R1, asm.DWord))
	}
	insns = append(insns,
		asm.LoadMapPtr(asm.R1, counts),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(value)),
		asm.Mov.Imm(asm.R4, unix.BPF_NOEXIST),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, dropped),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	)
	return insns
}

// Attach makes counter event fd (opened with CounterAttr) count into tc
// as kind, instead of writing samples. Events the kernel creates by
// inheritance from fd share the program.
func (tc *ThreadCounts) Attach(fd, kind int) error {
	if kind < 0 || kind >= len(tc.progs) {
		return fmt.Errorf("counter kind %d of %d", kind, len(tc.progs))
	}
	return os.NewSyscallError("ioctl PERF_EVENT_IOC_SET_BPF", unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, tc.progs[kind].FD()))
}

// Counts returns every entry: each thread incarnation that had an event
// and was not deleted, with its counts by kind.
func (tc *ThreadCounts) Counts() (map[ThreadKey][]uint64, error) {
	out := map[ThreadKey][]uint64{}
	var k ThreadKey
	v := make([]uint64, tc.kinds)
	it := tc.counts.Iterate()
	for it.Next(&k, &v) {
		out[k] = append([]uint64(nil), v...)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading the per-thread counts: %w", err)
	}
	return out, nil
}

// Delete forgets the entry of k, once read.
func (tc *ThreadCounts) Delete(k ThreadKey) error {
	if err := tc.counts.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("deleting per-thread counts: %w", err)
	}
	return nil
}

// Dropped returns the number of events not counted, since tc was
// created, because the map had no room for another thread.
func (tc *ThreadCounts) Dropped() (uint64, error) {
	var perCPU []uint64
	if err := tc.dropped.Lookup(uint32(0), &perCPU); err != nil {
		return 0, fmt.Errorf("reading the dropped counts: %w", err)
	}
	var n uint64
	for _, c := range perCPU {
		n += c
	}
	return n, nil
}

// Close releases the programs and maps; the events they are attached to
// keep them until they are closed too.
func (tc *ThreadCounts) Close() {
	for _, p := range tc.progs {
		p.Close()
	}
	tc.progs = nil
	if tc.counts != nil {
		tc.counts.Close()
	}
	if tc.dropped != nil {
		tc.dropped.Close()
	}
}

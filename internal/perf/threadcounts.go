package perf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"trueprof/internal/cachefile"
)

// ThreadCounts collects the page faults and CPU migrations of a set of
// processes' threads from the counts the kernel keeps in every
// task_struct anyway (min_flt + maj_flt, se.nr_migrations), so counting
// costs the threads nothing per fault or migration: no software event
// overflows, no program runs at each occurrence.
//
// Three BPF programs on raw tracepoints follow the processes:
//   - sched_process_fork adds a process forked by a tracked one (a
//     forked task's counts start at 0, copy_mm and __sched_fork reset
//     them, so its counts are exact from its first instruction);
//   - sched_process_exec starts tracking a process that waits for its
//     exec (Track with atExec: the exec wrapper of a launched target) and
//     keeps the exec'ing thread's counts at that point as its base;
//   - sched_process_exit keeps each exiting thread's final counts, keyed
//     by its incarnation, and forgets a process whose last thread exits.
//     It runs after exit_mm, so no user fault can follow, and before the
//     kernel writes the thread's PERF_RECORD_EXIT.
//
// A thread costs one map entry at its exit. Threads still running are
// read from /proc (ReadTaskCounts).
type ThreadCounts struct {
	procs   *ebpf.Map // HASH: tgid (u32) -> u64, procWaitsExec or procTracked
	exits   *ebpf.Map // HASH: ThreadKey -> TaskCounts at exit
	execs   *ebpf.Map // HASH: ThreadKey -> TaskCounts at exec (bases)
	dropped *ebpf.Map // PERCPU_ARRAY[1]: threads or processes with no room
	progs   []*ebpf.Program
	links   []link.Link
}

// ThreadKey names a thread incarnation: its ids and its start time
// (task_struct.start_time, CLOCK_MONOTONIC ns, the clock of the records).
type ThreadKey struct {
	TID, PID uint32
	Start    uint64
}

// TaskCounts are a thread's counts since it was forked: minor and major
// page faults, and CPU migrations.
type TaskCounts struct {
	PageFaults, Migrations uint64
}

// Sub returns c minus base, each count at least 0.
func (c TaskCounts) Sub(base TaskCounts) TaskCounts {
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return TaskCounts{sub(c.PageFaults, base.PageFaults), sub(c.Migrations, base.Migrations)}
}

// ErrNoBPF is wrapped by NewThreadCounts when the kernel or the
// permissions do not allow BPF counting.
var ErrNoBPF = errors.New("BPF per-thread counting not available")

// ThreadCountsEntries bounds the exited threads whose exits the
// recorder has not processed yet (it deletes an entry once it took it),
// and ThreadCountsProcs the processes tracked at once (a process is
// forgotten when its last thread exits). Entries are allocated when
// first used (BPF_F_NO_PREALLOC), but a hash map's bucket array is not:
// 16 bytes an entry, zeroed when the map is created, and every reading
// of the map (Exits) walks all of it. At 1<<18 exit entries the 4 MiB
// took 1.5-1.7 ms of every start, the last of what the launched target
// waits for, and each reading 0.2-0.5 ms; at 1<<16, 0.4 ms and 0.05-0.1
// ms: 65,536 exits are 1.3 s of 50,000 threads ending a second while the
// recorder processes nothing (it can be busy reading a large module's
// symbols), and a thread with no room is counted lost (Dropped).
const (
	ThreadCountsEntries = 1 << 16
	ThreadCountsProcs   = 1 << 14
)

// initPIDNamespace is the inode number of the initial PID namespace
// (PROC_PID_INIT_INO).
const initPIDNamespace = 0xEFFFFFFC

// States of a tracked process (the procs map's values).
const (
	procWaitsExec = 0 // counted from its next exec on
	procTracked   = 1
)

// taskOffsets are the byte offsets of the task_struct fields the
// programs read, from the kernel's BTF.
type taskOffsets struct {
	pid, tgid, start, minFlt, majFlt, migrations, signal, live int32
}

// NewThreadCounts loads the programs and maps and attaches the programs;
// no process is tracked until Track.
func NewThreadCounts() (*ThreadCounts, error) {
	// BPF sees the kernel's global ids; a recorder in another PID
	// namespace sees the target's by other numbers.
	var ns unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &ns); err != nil || ns.Ino != initPIDNamespace {
		return nil, fmt.Errorf("%w: trueprof runs in a PID namespace other than the initial one (%v)", ErrNoBPF, err)
	}
	off, err := cachedTaskOffsets()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoBPF, err)
	}
	tc := &ThreadCounts{}
	fail := func(what string, err error) (*ThreadCounts, error) {
		tc.Close()
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%w: %s needs CAP_BPF and CAP_PERFMON (or root): %w", ErrNoBPF, what, err)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrNoBPF, what, err)
	}
	newHash := func(name string, key, value uint32, entries uint32) (*ebpf.Map, error) {
		return ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.Hash, KeySize: key, ValueSize: value, MaxEntries: entries, Flags: unix.BPF_F_NO_PREALLOC})
	}
	keySize, valueSize := uint32(unsafe.Sizeof(ThreadKey{})), uint32(unsafe.Sizeof(TaskCounts{}))
	if tc.procs, err = newHash("tp_procs", 4, 8, ThreadCountsProcs); err != nil {
		return fail("creating the process map", err)
	}
	if tc.exits, err = newHash("tp_exits", keySize, valueSize, ThreadCountsEntries); err != nil {
		return fail("creating the exit counts map", err)
	}
	if tc.execs, err = newHash("tp_execs", keySize, valueSize, 1024); err != nil {
		return fail("creating the exec counts map", err)
	}
	if tc.dropped, err = ebpf.NewMap(&ebpf.MapSpec{Name: "tp_cnt_dropped", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}); err != nil {
		return fail("creating the drop counter", err)
	}
	for _, p := range []struct {
		tracepoint string
		insns      asm.Instructions
	}{
		{"sched_process_fork", tc.forkProgram(off)},
		{"sched_process_exec", tc.execProgram(off)},
		{"sched_process_exit", tc.exitProgram(off)},
	} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "tp_" + strings.TrimPrefix(p.tracepoint, "sched_process_"),
			Type:         ebpf.RawTracepoint,
			Instructions: p.insns,
			License:      "GPL", // bpf_probe_read_kernel, bpf_get_current_task
		})
		if err != nil {
			return fail("loading the "+p.tracepoint+" program", err)
		}
		tc.progs = append(tc.progs, prog)
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: p.tracepoint, Program: prog})
		if err != nil {
			return fail("attaching to "+p.tracepoint, err)
		}
		tc.links = append(tc.links, l)
	}
	return tc, nil
}

// cachedTaskOffsets returns the offsets stored for the running kernel,
// or reads them from its BTF and stores them: parsing the kernel's BTF
// takes 18-34 ms here, a good part of the start of a short recording.
// The cache is keyed by the kernel's release, build version and BTF
// size, and an entry that does not parse or holds an offset beyond any
// task_struct is read again (a wrong offset would only make the
// programs' bpf_probe_read_kernel read wrong counts, but still).
func cachedTaskOffsets() (taskOffsets, error) {
	key, path := taskOffsetsKey()
	type entry struct {
		Key     string
		Offsets [8]int32
	}
	fields := func(o *taskOffsets) []*int32 {
		return []*int32{&o.pid, &o.tgid, &o.start, &o.minFlt, &o.majFlt, &o.migrations, &o.signal, &o.live}
	}
	if b, err := os.ReadFile(path); err == nil && key != "" {
		var e entry
		if json.Unmarshal(b, &e) == nil && e.Key == key {
			var off taskOffsets
			ok := true
			for i, f := range fields(&off) {
				*f = e.Offsets[i]
				ok = ok && *f >= 0 && *f < 1<<16
			}
			if ok {
				return off, nil
			}
		}
	}
	off, err := readTaskOffsets()
	if err != nil || key == "" {
		return off, err
	}
	e := entry{Key: key}
	for i, f := range fields(&off) {
		e.Offsets[i] = *f
	}
	if b, err := json.Marshal(e); err == nil {
		// A concurrent reader sees the old entry or the new one. A
		// failed write costs the next run a reading of the BTF.
		_ = cachefile.Write(path, b, 0o600)
	}
	return off, nil
}

// KernelRelease returns the running kernel's release (uname -r), "" if
// it cannot be read: traces and stored calibrations name the kernel they
// were made on.
func KernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// taskOffsetsKey names the running kernel's BTF, and the cache file;
// "" when there is no per-user cache directory.
func taskOffsetsKey() (key, path string) {
	var u unix.Utsname
	st, err := os.Stat("/sys/kernel/btf/vmlinux")
	dir, derr := cachefile.Dir()
	if err != nil || derr != nil || unix.Uname(&u) != nil {
		return "", ""
	}
	key = fmt.Sprintf("%s %s %d", unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Version[:]), st.Size())
	return key, filepath.Join(dir, "task-offsets.json")
}

// readTaskOffsets finds the fields in the kernel's BTF.
func readTaskOffsets() (taskOffsets, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return taskOffsets{}, fmt.Errorf("reading the kernel's BTF: %w", err)
	}
	var task, signal *btf.Struct
	if err := spec.TypeByName("task_struct", &task); err != nil {
		return taskOffsets{}, fmt.Errorf("kernel BTF: %w", err)
	}
	if err := spec.TypeByName("signal_struct", &signal); err != nil {
		return taskOffsets{}, fmt.Errorf("kernel BTF: %w", err)
	}
	var off taskOffsets
	for _, f := range []struct {
		in   *btf.Struct
		path string
		size uint32
		dst  *int32
	}{
		{task, "pid", 4, &off.pid},
		{task, "tgid", 4, &off.tgid},
		{task, "start_time", 8, &off.start},
		{task, "min_flt", 8, &off.minFlt},
		{task, "maj_flt", 8, &off.majFlt},
		{task, "se.nr_migrations", 8, &off.migrations},
		{task, "signal", 8, &off.signal},
		{signal, "live", 4, &off.live},
	} {
		o, err := fieldOffset(f.in, strings.Split(f.path, "."), f.size)
		if err != nil {
			return taskOffsets{}, fmt.Errorf("kernel BTF: %s.%s: %w", f.in.Name, f.path, err)
		}
		*f.dst = int32(o)
	}
	return off, nil
}

// fieldOffset is the byte offset of the field at path in t, looking
// through anonymous structs and unions (as randomized_struct_fields_start
// makes), checking that it has size bytes.
func fieldOffset(t btf.Type, path []string, size uint32) (uint32, error) {
	var members []btf.Member
	switch t := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		members = t.Members
	case *btf.Union:
		members = t.Members
	default:
		return 0, fmt.Errorf("%s is not a struct", path[0])
	}
	for _, m := range members {
		if m.BitfieldSize != 0 || m.Offset%8 != 0 {
			continue
		}
		base := m.Offset.Bytes()
		if m.Name == "" {
			if o, err := fieldOffset(m.Type, path, size); err == nil {
				return base + o, nil
			}
			continue
		}
		if m.Name != path[0] {
			continue
		}
		if len(path) > 1 {
			o, err := fieldOffset(m.Type, path[1:], size)
			return base + o, err
		}
		if n, err := btf.Sizeof(m.Type); err != nil || uint32(n) != size {
			return 0, fmt.Errorf("size %d, want %d (%v)", n, size, err)
		}
		return base, nil
	}
	return 0, errors.New("no such field")
}

// The programs' stack: the thread's key, its counts, the tgid (the
// procs map's key) and a scratch slot.
const (
	stKey    = -16 // ThreadKey: TID, PID, then Start at -8
	stCounts = -32 // TaskCounts
	stTGID   = -36
	stTmp    = -48
)

// readInto emits bpf_probe_read_kernel(fp+dst, size, R6+off): a field of
// the task R6 points to. R0 is 0 on success; the slot is zeroed on
// failure.
func readInto(dst int16, size int32, off int32) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, int32(dst)),
		asm.Mov.Imm(asm.R2, size),
		asm.Mov.Reg(asm.R3, asm.R6),
		asm.Add.Imm(asm.R3, off),
		asm.FnProbeReadKernel.Call(),
	}
}

// lookupProc emits the lookup of the current process, jumping to exit
// unless its state is want, and leaves a pointer to its state in R7, the
// tgid at stTGID and the thread's TID and PID at stKey.
func (tc *ThreadCounts) lookupProc(want uint64) asm.Instructions {
	return asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, stKey, asm.R0, asm.DWord), // TID, then PID (the tgid)
		asm.RSh.Imm(asm.R0, 32),
		asm.StoreMem(asm.RFP, stTGID, asm.R0, asm.Word),
		asm.LoadMapPtr(asm.R1, tc.procs.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stTGID),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R1, asm.R7, 0, asm.DWord),
		asm.JNE.Imm(asm.R1, int32(want), "exit"),
	}
}

// readCurrent emits the current thread's start time into stKey's Start
// and its counts into stCounts, leaving the task pointer in R6.
func readCurrent(off taskOffsets) asm.Instructions {
	insns := asm.Instructions{
		asm.FnGetCurrentTask.Call(),
		asm.Mov.Reg(asm.R6, asm.R0),
	}
	insns = append(insns, readInto(stKey+8, 8, off.start)...)
	insns = append(insns, readInto(stCounts, 8, off.minFlt)...)
	insns = append(insns, readInto(stTmp, 8, off.majFlt)...)
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.RFP, stCounts, asm.DWord),
		asm.LoadMem(asm.R2, asm.RFP, stTmp, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R2),
		asm.StoreMem(asm.RFP, stCounts, asm.R1, asm.DWord),
	)
	return append(insns, readInto(stCounts+8, 8, off.migrations)...)
}

// mapUpdate emits m[fp+key] = fp+value, going on at then, or counting
// a failure as a drop.
func mapUpdate(m *ebpf.Map, key, value int32, then string) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, key),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, value),
		asm.Mov.Imm(asm.R4, unix.BPF_ANY),
		asm.FnMapUpdateElem.Call(),
		asm.JEq.Imm(asm.R0, 0, then),
		asm.Ja.Label("drop"),
	}
}

// epilogue emits the drop count (jumped to with "drop"), and the exit.
func (tc *ThreadCounts) epilogue() asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, stTGID, 0, asm.Word).WithSymbol("drop"),
		asm.LoadMapPtr(asm.R1, tc.dropped.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stTGID),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	}
}

// forkProgram (sched_process_fork: args parent, child) tracks a process
// a tracked process forks. The parent is the current task; a child that
// is a thread belongs to a tracked process already.
func (tc *ThreadCounts) forkProgram(off taskOffsets) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R6, asm.R1, 8, asm.DWord), // args[1]: the child
	}
	insns = append(insns, tc.lookupProc(procTracked)...)
	insns = append(insns, readInto(stTmp, 4, off.pid)...)
	insns = append(insns, asm.JNE.Imm(asm.R0, 0, "drop"))
	insns = append(insns, readInto(stTmp+4, 4, off.tgid)...)
	insns = append(insns,
		asm.JNE.Imm(asm.R0, 0, "drop"),
		asm.LoadMem(asm.R1, asm.RFP, stTmp, asm.Word),
		asm.LoadMem(asm.R2, asm.RFP, stTmp+4, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, "exit"), // a thread
		asm.Mov.Imm(asm.R1, procTracked),
		asm.StoreMem(asm.RFP, stCounts, asm.R1, asm.DWord),
	)
	insns = append(insns, mapUpdate(tc.procs, stTmp+4, stCounts, "exit")...)
	return append(insns, tc.epilogue()...)
}

// execProgram (sched_process_exec, in the exec'ing thread) starts
// tracking a process that waited for its exec, and keeps the thread's
// counts at exec as its base.
func (tc *ThreadCounts) execProgram(off taskOffsets) asm.Instructions {
	insns := tc.lookupProc(procWaitsExec)
	insns = append(insns,
		asm.Mov.Imm(asm.R1, procTracked),
		asm.StoreMem(asm.R7, 0, asm.R1, asm.DWord),
	)
	insns = append(insns, readCurrent(off)...)
	insns = append(insns, mapUpdate(tc.execs, stKey, stCounts, "stored")...)
	insns = append(insns, asm.Ja.Label("exit").WithSymbol("stored"))
	return append(insns, tc.epilogue()...)
}

// exitProgram (sched_process_exit, in the exiting thread) keeps a
// tracked thread's final counts, and forgets its process when it was the
// last thread (signal->live, decremented before the tracepoint, is 0).
func (tc *ThreadCounts) exitProgram(off taskOffsets) asm.Instructions {
	insns := tc.lookupProc(procTracked)
	insns = append(insns, readCurrent(off)...)
	insns = append(insns, mapUpdate(tc.exits, stKey, stCounts, "stored")...)
	// The process's last thread? R6 is still the task.
	signal := readInto(stTmp, 8, off.signal)
	signal[0] = signal[0].WithSymbol("stored")
	insns = append(insns, signal...)
	insns = append(insns,
		asm.JNE.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R6, asm.RFP, stTmp, asm.DWord),
	)
	insns = append(insns, readInto(stTmp, 4, off.live)...)
	insns = append(insns,
		asm.JNE.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R1, asm.RFP, stTmp, asm.Word),
		asm.JNE.Imm(asm.R1, 0, "exit"),
		asm.LoadMapPtr(asm.R1, tc.procs.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stTGID),
		asm.FnMapDeleteElem.Call(),
		asm.Ja.Label("exit"),
	)
	return append(insns, tc.epilogue()...)
}

// Track starts counting the threads of process pid and of the processes
// it forks from now on: those of pid that exist now from their own
// start (their counts now are the caller's base), or, with atExec, from
// pid's next exec.
func (tc *ThreadCounts) Track(pid int, atExec bool) error {
	state := uint64(procTracked)
	if atExec {
		state = procWaitsExec
	}
	if err := tc.procs.Put(uint32(pid), state); err != nil {
		return fmt.Errorf("tracking process %d: %w", pid, err)
	}
	return nil
}

// Exits returns the counts of every thread that exited since it was
// tracked and was not deleted, by incarnation.
func (tc *ThreadCounts) Exits() (map[ThreadKey]TaskCounts, error) {
	return readCounts(tc.exits)
}

// Execs returns the counts at exec of each thread that exec'ed while its
// process waited for its exec (Track with atExec), by incarnation; its
// counts are from then on.
func (tc *ThreadCounts) Execs() (map[ThreadKey]TaskCounts, error) {
	return readCounts(tc.execs)
}

func readCounts(m *ebpf.Map) (map[ThreadKey]TaskCounts, error) {
	out := map[ThreadKey]TaskCounts{}
	var k ThreadKey
	var v TaskCounts
	it := m.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading the per-thread counts: %w", err)
	}
	return out, nil
}

// Delete forgets the exit (and exec) counts of k, once read.
func (tc *ThreadCounts) Delete(k ThreadKey) error {
	for _, m := range []*ebpf.Map{tc.exits, tc.execs} {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("deleting per-thread counts: %w", err)
		}
	}
	return nil
}

// Dropped returns the number of threads whose counts, and processes
// whose threads' counts, were not kept for want of room, since tc was
// created.
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

// Close detaches the programs and releases them and the maps.
func (tc *ThreadCounts) Close() {
	for _, l := range tc.links {
		l.Close()
	}
	tc.links = nil
	for _, p := range tc.progs {
		p.Close()
	}
	tc.progs = nil
	for _, m := range []*ebpf.Map{tc.procs, tc.exits, tc.execs, tc.dropped} {
		if m != nil {
			m.Close()
		}
	}
}

// ReadTaskCounts reads the counts of a running thread from
// /proc/PID/task/TID: stat's minflt and majflt, and sched's
// se.nr_migrations (without CONFIG_SCHED_DEBUG, which provides it,
// Migrations is 0).
func ReadTaskCounts(pid, tid int) (TaskCounts, error) {
	dir := fmt.Sprintf("/proc/%d/task/%d/", pid, tid)
	stat, err := os.ReadFile(dir + "stat")
	if err != nil {
		return TaskCounts{}, err
	}
	// The fields after the parenthesised command name start with the
	// state (field 3); minflt is field 10 and majflt field 12.
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 12-2 { // fields[12-3] is majflt
		return TaskCounts{}, fmt.Errorf("%sstat: unexpected format", dir)
	}
	var c TaskCounts
	for _, f := range []int{10, 12} {
		n, err := strconv.ParseUint(fields[f-3], 10, 64)
		if err != nil {
			return TaskCounts{}, fmt.Errorf("%sstat field %d: %w", dir, f, err)
		}
		c.PageFaults += n
	}
	sched, err := os.Open(dir + "sched")
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return TaskCounts{}, err
	}
	defer sched.Close()
	sc := bufio.NewScanner(sched)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(name) == "se.nr_migrations" {
			if c.Migrations, err = strconv.ParseUint(strings.TrimSpace(value), 10, 64); err != nil {
				return TaskCounts{}, fmt.Errorf("%ssched: se.nr_migrations: %w", dir, err)
			}
			return c, nil
		}
	}
	return c, sc.Err()
}

package uprobe

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"trueprof/internal/symbolize"
)

// LabelChange says that from Time, goroutine GoID of process PID (running
// on thread TID) carries the runtime/pprof labels Pairs, in the order of
// the label set (sorted by key); none means it carries no labels.
type LabelChange struct {
	Time     uint64
	PID, TID uint32
	GoID     uint64
	Pairs    []LabelPair
	// Truncated says that the set had more than MaxLabels labels, or a
	// key or value longer than MaxLabelBytes, and Pairs holds only their
	// beginnings.
	Truncated bool
}

// LabelPair is one label: Key=Value.
type LabelPair struct{ Key, Value string }

// Limits of what the BPF program copies of a label set: a change costs
// the target the copy, and records are of fixed size.
const (
	MaxLabels     = 16
	MaxLabelBytes = 64
)

// ErrNoLabels means the executable does not set runtime/pprof labels:
// it has no runtime/pprof.runtime_setProfLabel.
var ErrNoLabels = errors.New("no runtime/pprof.runtime_setProfLabel (the program sets no labels)")

// Labels follows the runtime/pprof labels of one Go process's
// goroutines. The label set a goroutine carries is an immutable object
// that runtime/pprof hands to the runtime through
// runtime/pprof.runtime_setProfLabel (pprof.Do, pprof.SetGoroutineLabels)
// and that the runtime copies into a goroutine it creates
// (runtime.newproc1): a probe on the first copies the set's labels as it
// is set, since the set may be garbage once replaced, and a probe on
// runtime.execute sees the inherited set when the new goroutine first
// runs, and copies it unless the goroutine's set has not changed since
// the last copy. Its methods are not safe for concurrent use.
type Labels struct {
	ring
	last  *ebpf.Map // goroutine id → the label set last reported, and the one it replaced
	links []link.Link
}

// labelRingSize holds about 15,000 changes (each record takes a fixed
// 2.2 KB), what a program changing labels 150,000 times a second sets
// between two reads of the recorder (every 100 ms, or when the ring is a
// quarter full).
const labelRingSize = 32 << 20

// Layout of a label record: time, pid_tgid, goid (u64s), the number of
// labels in the set (u32), flags (u32), then MaxLabels slots of key
// length, value length (u32s, the lengths in the target), key and value
// bytes.
const (
	labelHeader     = 32
	labelSlot       = 8 + 2*MaxLabelBytes
	labelRecordSize = labelHeader + MaxLabels*labelSlot
	labelTruncated  = 1
)

// Probe cookies of the label program.
const (
	labelFromSet  = 0 // runtime_setProfLabel(labels): RAX the set, R14 the g
	labelFromExec = 1 // runtime.execute(gp): RAX the g, the set in gp.labels
)

// ptRegsR14 is the offset of r14, where Go's register ABI keeps the
// running goroutine's g, in struct pt_regs.
const ptRegsR14 = 8

// AttachLabels probes the Go executable at path in process pid to report
// every change of a goroutine's labels. layout comes from
// symbolize.ReadGoLayout on the same file; its LabelSet must be known.
// It returns ErrNoLabels for a program that sets no labels.
func AttachLabels(pid int, path string, layout symbolize.GoLayout) (*Labels, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("uprobe: invalid pid %d", pid)
	}
	sites, err := labelSites(path)
	if err != nil {
		return nil, err
	}
	if layout.GoID <= 0 || layout.Labels <= 0 || layout.LabelSet.Size <= 0 {
		return nil, fmt.Errorf("uprobe: %s: %w: unknown layout of runtime/pprof labels", path, ErrNotSupported)
	}
	l := &Labels{}
	l.last, err = ebpf.NewMap(&ebpf.MapSpec{Name: "trueprof_lg", Type: ebpf.LRUHash, KeySize: 8, ValueSize: 16, MaxEntries: 1 << 16})
	if err != nil {
		return nil, fmt.Errorf("uprobe: creating the BPF map: %w", err)
	}
	if err := l.load("trueprof_l", labelRingSize, func(events, lost int) asm.Instructions {
		return labelProgram(events, lost, l.last.FD(), layout)
	}); err != nil {
		l.Close()
		return nil, err
	}
	lk, err := attachEntries(pid, path, l.prog, []uint64{sites[0].Entry, sites[1].Entry}, []uint64{labelFromSet, labelFromExec})
	if err != nil {
		l.Close()
		return nil, err
	}
	l.links = append(l.links, lk)
	return l, nil
}

// labelSites plans the entry probes of runtime_setProfLabel and
// runtime.execute, which must find their argument in RAX.
func labelSites(path string) ([]Site, error) {
	names := []string{"runtime/pprof.runtime_setProfLabel", "runtime.execute"}
	found, err := entrySites(path, names)
	if err != nil {
		return nil, err
	}
	if _, ok := found[names[0]]; !ok {
		return nil, fmt.Errorf("%s: %w", path, ErrNoLabels)
	}
	if _, ok := found[names[1]]; !ok {
		return nil, fmt.Errorf("%s: %w: no runtime.execute", path, ErrNoMatch)
	}
	return []Site{found[names[0]], found[names[1]]}, nil
}

// labelProgram is the BPF program of the label probes. It finds the
// goroutine and its label set (by the cookie), skips a runtime.execute
// whose goroutine carries the set it carried at the last report (or
// none, never having had one), remembers the set in the map last, and
// copies the set's labels into a ring record.
//
// The probe on runtime_setProfLabel fires at its entry, before its
// store: a goroutine preempted there (the prologue's stack check is
// where the scheduler preempts it) runs again with the set it had, and
// runtime.execute saw that set as a change, which it reported, and then
// the new one again (TestLabels: a worker's "worker=3" and "" reported
// twice, in 2 of some 20 runs). So the map also keeps the set a
// runtime_setProfLabel replaces, which runtime.execute takes for
// unchanged too: that store is still to come.
func labelProgram(events, lost, last int, l symbolize.GoLayout) asm.Instructions {
	ls := l.LabelSet
	read := readUser
	// Registers: R6 ctx, then the number of labels; R7 the cookie, then
	// the record; R8 the label set, then a label; R9 the g, then the
	// labels' array. Stack: fp-8 scratch, fp-16 goid, fp-32 flags, fp-48
	// a string header, fp-56 the loss counter's key, fp-72 the map's
	// value: the set (fp-72) and the one it replaces (fp-64).
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetAttachCookie.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.JEq.Imm(asm.R7, labelFromExec, "exec"),
		asm.LoadMem(asm.R9, asm.R6, ptRegsR14, asm.DWord),
		asm.LoadMem(asm.R8, asm.R6, ptRegsRAX, asm.DWord),
	}
	insns = append(insns, read(asm.R2, asm.R9, int32(l.Labels), "lost")...)
	insns = append(insns,
		asm.StoreMem(asm.RFP, -64, asm.R2, asm.DWord), // the set replaced
		asm.Ja.Label("goid"),
		asm.LoadMem(asm.R9, asm.R6, ptRegsRAX, asm.DWord).WithSymbol("exec"),
	)
	insns = append(insns, read(asm.R8, asm.R9, int32(l.Labels), "lost")...)
	insns = append(insns, asm.StoreMem(asm.RFP, -64, asm.R8, asm.DWord))
	goid := read(asm.R9, asm.R9, int32(l.GoID), "lost")
	goid[0] = goid[0].WithSymbol("goid")
	insns = append(insns, goid...)
	insns = append(insns,
		asm.StoreMem(asm.RFP, -16, asm.R9, asm.DWord),
		asm.StoreMem(asm.RFP, -72, asm.R8, asm.DWord),
		asm.JEq.Imm(asm.R7, labelFromSet, "remember"),
		asm.LoadMapPtr(asm.R1, last),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, "known"),
		asm.JEq.Imm(asm.R8, 0, "exit"), // never had labels
		asm.Ja.Label("remember"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord).WithSymbol("known"),
		asm.JEq.Reg(asm.R1, asm.R8, "exit"), // unchanged
		asm.LoadMem(asm.R1, asm.R0, 8, asm.DWord),
		asm.JEq.Reg(asm.R1, asm.R8, "exit"), // a store still to come
		asm.LoadMapPtr(asm.R1, last).WithSymbol("remember"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -72),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),

		// The record.
		asm.LoadMapPtr(asm.R1, events),
		asm.Mov.Imm(asm.R2, labelRecordSize),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, "lost"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreMem(asm.R7, 16, asm.R9, asm.DWord),
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.R7, 8, asm.R0, asm.DWord),
		asm.FnKtimeGetNs.Call(), // CLOCK_MONOTONIC
		asm.StoreMem(asm.R7, 0, asm.R0, asm.DWord),
		asm.StoreImm(asm.R7, 24, 0, asm.Word), // no labels
		asm.StoreImm(asm.RFP, -32, 0, asm.Word),
		asm.JEq.Imm(asm.R8, 0, "submit"),
	)
	// The set's slice header: array, len.
	insns = append(insns, read(asm.R9, asm.R8, int32(ls.List), "discard")...)
	insns = append(insns, read(asm.R6, asm.R8, int32(ls.List+8), "discard")...)
	insns = append(insns,
		asm.StoreMem(asm.R7, 24, asm.R6, asm.Word),
		asm.JLE.Imm(asm.R6, MaxLabels, "labels"),
		asm.StoreImm(asm.RFP, -32, labelTruncated, asm.Word),
		asm.Mov.Imm(asm.R6, MaxLabels),
	)
	first := true
	for i := range MaxLabels {
		slot := int16(labelHeader + i*labelSlot)
		for j, field := range []int64{ls.Key, ls.Value} {
			done := fmt.Sprintf("l%d_%d", i, j)
			in := asm.Instructions{
				// fp-48: the string's pointer and length.
				asm.Mov.Reg(asm.R3, asm.R9),
				asm.Add.Imm(asm.R3, int32(int64(i)*ls.Size+field)),
				asm.Mov.Reg(asm.R1, asm.RFP),
				asm.Add.Imm(asm.R1, -48),
				asm.Mov.Imm(asm.R2, 16),
				asm.FnProbeReadUser.Call(),
				asm.JNE.Imm(asm.R0, 0, "discard"),
				asm.LoadMem(asm.R2, asm.RFP, -40, asm.DWord),
				asm.StoreMem(asm.R7, slot+int16(4*j), asm.R2, asm.Word),
				asm.JLE.Imm(asm.R2, MaxLabelBytes, done+"_len"),
				asm.StoreImm(asm.RFP, -32, labelTruncated, asm.Word),
				asm.Mov.Imm(asm.R2, MaxLabelBytes),
				asm.Mov.Reg(asm.R1, asm.R7).WithSymbol(done + "_len"),
				asm.Add.Imm(asm.R1, int32(slot)+8+int32(j*MaxLabelBytes)),
				asm.LoadMem(asm.R3, asm.RFP, -48, asm.DWord),
				asm.FnProbeReadUser.Call(),
				asm.JNE.Imm(asm.R0, 0, "discard"),
			}
			if j == 0 {
				in = append(asm.Instructions{asm.JLE.Imm(asm.R6, int32(i), "submit")}, in...)
				if first {
					in[0] = in[0].WithSymbol("labels")
					first = false
				}
			}
			insns = append(insns, in...)
		}
	}
	insns = append(insns,
		asm.LoadMem(asm.R1, asm.RFP, -32, asm.Word).WithSymbol("submit"),
		asm.StoreMem(asm.R7, 28, asm.R1, asm.Word),
	)
	insns = append(insns, wakeup(events, labelRingSize, asm.R2, "wake")...)
	insns = append(insns,
		asm.Mov.Reg(asm.R1, asm.R7).WithSymbol("wake"),
		asm.FnRingbufSubmit.Call(),
		asm.Ja.Label("exit"),

		asm.Mov.Reg(asm.R1, asm.R7).WithSymbol("discard"),
		asm.Mov.Imm(asm.R2, 0),
		asm.FnRingbufDiscard.Call(),
	)
	return append(insns, countLost(lost, -56)...)
}

// Read drains the label changes available now, calling fn for each, and
// returns their number. A goroutine's changes come in order.
func (l *Labels) Read(fn func(LabelChange)) int {
	n := 0
	for {
		b, ok := l.next(labelRecordSize)
		if !ok {
			return n
		}
		e := binary.NativeEndian
		pidTgid := e.Uint64(b[8:])
		c := LabelChange{Time: e.Uint64(b), PID: uint32(pidTgid >> 32), TID: uint32(pidTgid), GoID: e.Uint64(b[16:])}
		count := int(e.Uint32(b[24:]))
		c.Truncated = e.Uint32(b[28:])&labelTruncated != 0
		for i := range min(count, MaxLabels) {
			s := b[labelHeader+i*labelSlot:]
			str := func(j int) string {
				n := min(int(e.Uint32(s[4*j:])), MaxLabelBytes)
				return string(s[8+j*MaxLabelBytes : 8+j*MaxLabelBytes+n])
			}
			c.Pairs = append(c.Pairs, LabelPair{Key: str(0), Value: str(1)})
		}
		fn(c)
		n++
	}
}

// Close removes the probes, then frees the ring and the map. The
// process continues unharmed.
func (l *Labels) Close() error {
	err := closeAll(&l.links, &l.ring)
	if l.last != nil {
		err = errors.Join(err, l.last.Close())
		l.last = nil
	}
	return err
}

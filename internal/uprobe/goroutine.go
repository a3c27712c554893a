package uprobe

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/arch/x86/x86asm"

	"trueprof/internal/symbolize"
)

// GoSwitch says that thread TID of process PID began running goroutine
// GoID at Time (CLOCK_MONOTONIC ns): what the thread runs from then on
// belongs to that goroutine until the thread's next switch.
type GoSwitch struct {
	Time     uint64
	PID, TID uint32
	GoID     uint64
}

// Goroutines follows the goroutine switches of one Go process: Go's
// scheduler multiplexes goroutines on threads, so a thread's samples and
// events belong to whichever goroutine it ran last.
//
// The scheduler starts every goroutine it runs on a thread through
// runtime.execute(gp *g, inheritTime bool), with gp in RAX under Go's
// register ABI (Go 1.17+), and switches coroutines (iter.Pull) through
// runtime.coroswitch_m(gp *g), which resumes gp.coroarg.gp. One
// uprobe_multi link probes both, and its BPF program reads the goroutine
// id from the g at the offsets of the binary's DWARF
// (symbolize.ReadGoLayout). A goroutine that returns from a system call
// on the same thread passes through neither, and needs no switch: the
// thread never ran anything else meanwhile. Its methods are not safe for
// concurrent use.
type Goroutines struct {
	ring
	links []link.Link
	// Functions lists the probed functions, runtime.execute first.
	Functions []string
}

// goRingSize holds about 520,000 switches, most of a second at the
// fastest rate measured with the probe on this machine's two CPUs
// (700,000 a second, bench/goroutines): none was lost there, where a
// quarter of the size lost some.
const goRingSize = 16 << 20

// goRecordSize is the size of a switch record: time, pid_tgid and goid,
// each a u64.
const goRecordSize = 24

// How the BPF program finds the goroutine, chosen by the probe's cookie
// (the function's index in goSites' list).
const (
	goFromArg  = 0 // the g is the first argument (runtime.execute)
	goFromCoro = 1 // the first argument's coroarg.gp (runtime.coroswitch_m)
)

// ptRegsRAX is the offset of rax in the x86-64 struct pt_regs that a
// uprobe program's context points to.
const ptRegsRAX = 80

// AttachGoroutines probes the scheduler of the Go executable at path in
// process pid (running, or stopped in the exec wrapper before its exec
// of path, as for Attach) to report
// every goroutine switch. layout comes from symbolize.ReadGoLayout on the
// same file. It fails, having placed nothing, if the executable has no
// runtime.execute whose first argument a probe can read.
func AttachGoroutines(pid int, path string, layout symbolize.GoLayout) (*Goroutines, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("uprobe: invalid pid %d", pid)
	}
	if layout.GoID <= 0 {
		return nil, errors.New("uprobe: no offset of runtime.g.goid")
	}
	sites, err := goSites(path, layout)
	if err != nil {
		return nil, err
	}
	g := &Goroutines{}
	var offs, cookies []uint64
	for _, s := range sites {
		offs = append(offs, s.site.Entry)
		cookies = append(cookies, s.mode)
		g.Functions = append(g.Functions, s.site.Function)
	}
	if err := g.load("trueprof_g", goRingSize, func(events, lost int) asm.Instructions {
		return goProgram(events, lost, layout)
	}); err != nil {
		g.Close()
		return nil, err
	}
	lk, err := attachEntries(pid, path, g.prog, offs, cookies)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.links = append(g.links, lk)
	return g, nil
}

// attachEntries places prog on the file offsets offs of path for pid,
// each probe with its cookie, in one uprobe_multi link.
func attachEntries(pid int, path string, prog *ebpf.Program, offs, cookies []uint64) (link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	return attachMulti(ex, prog, &link.UprobeMultiOptions{Addresses: offs, Cookies: cookies, PID: uint32(pid)}, false, pid, path)
}

// goSite is a scheduler function probed for switches.
type goSite struct {
	site Site
	mode uint64
}

// goSites plans the probes on runtime.execute and, if the binary has
// coroutines, runtime.coroswitch_m (entrySites).
func goSites(path string, layout symbolize.GoLayout) ([]goSite, error) {
	names := []string{"runtime.execute"}
	if layout.CoroG >= 0 && layout.CoroArg > 0 {
		names = append(names, "runtime.coroswitch_m")
	}
	found, err := entrySites(path, names)
	if err != nil {
		return nil, err
	}
	if _, ok := found[names[0]]; !ok {
		return nil, fmt.Errorf("%s: %w: no %s", path, ErrNoMatch, names[0])
	}
	var out []goSite
	for mode, name := range names {
		if s, ok := found[name]; ok {
			out = append(out, goSite{site: s, mode: uint64(mode)})
		}
	}
	return out, nil
}

// entrySites plans the entry probes of those of the named functions that
// path has, each on the instruction Plan chooses for an entry probe (the
// push %rbp past the stack check, which the kernel emulates), provided
// nothing before it changes RAX, the first argument.
func entrySites(path string, names []string) (map[string]Site, error) {
	f, err := openX86(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	found := map[string]Site{}
	for _, fn := range f.Functions() {
		if _, done := found[fn.Name]; done || !slices.Contains(names, fn.Name) {
			continue
		}
		s, err := planFunction(f, fn, false) // Go: probes on its RET instructions
		if err == nil {
			err = keepsRAX(f, fn, s)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, fn.Name, err)
		}
		found[fn.Name] = s
	}
	return found, nil
}

// keepsRAX checks that no instruction a thread runs between the start of
// fn and the entry probe of s writes RAX, the first argument the probe
// reads: Go's prologue compares the stack pointer with the stack guard
// and branches to the stack-growth path, which returns to the start with
// the arguments restored.
func keepsRAX(f *symbolize.File, fn symbolize.Function, s Site) error {
	code, err := f.Code(fn.Addr, fn.Size)
	if err != nil {
		return err
	}
	ins, err := decodeFunc(code)
	if err != nil {
		return err
	}
	for _, in := range ins {
		if off, _ := f.FileOffset(fn.Addr + uint64(in.off)); off >= s.Entry {
			return nil
		}
		if in.op == x86asm.CMP || in.op == x86asm.TEST || isCondJump(in.op) {
			continue
		}
		dec, err := x86asm.Decode(in.raw, 64)
		if err != nil {
			return err
		}
		if r, ok := dec.Args[0].(x86asm.Reg); ok && (r == x86asm.RAX || r == x86asm.EAX || r == x86asm.AX || r == x86asm.AL || r == x86asm.AH) {
			return fmt.Errorf("%w: the prologue writes RAX before the probe (%v)", ErrNotSupported, dec)
		}
	}
	return nil
}

// goProgram is the BPF program of the scheduler probes. It follows the
// pointers from the probed function's first argument to the goroutine
// id with bpf_probe_read_user and writes
// {bpf_ktime_get_ns(), bpf_get_current_pid_tgid(), goid} to the ring; a
// read that fails counts as a lost record.
func goProgram(events, lost int, l symbolize.GoLayout) asm.Instructions {
	// read loads the u64 at R3+off of the target's memory into R3.
	read := func(off int64) asm.Instructions { return readUser(asm.R3, asm.R3, int32(off), "lost") }
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // ctx
		asm.FnGetAttachCookie.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R3, asm.R6, ptRegsRAX, asm.DWord),
		asm.JEq.Imm(asm.R7, goFromArg, "goid"),
	}
	if l.CoroArg > 0 && l.CoroG >= 0 {
		insns = append(insns, read(l.CoroArg)...)
		insns = append(insns, read(l.CoroG)...)
	}
	goid := read(l.GoID)
	goid[0] = goid[0].WithSymbol("goid")
	insns = append(insns, goid...)
	insns = append(insns,
		asm.StoreMem(asm.RFP, -8, asm.R3, asm.DWord),
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, -16, asm.R0, asm.DWord),
		asm.FnKtimeGetNs.Call(), // CLOCK_MONOTONIC
		asm.StoreMem(asm.RFP, -24, asm.R0, asm.DWord),
	)
	return append(insns, output(events, lost, goRingSize, goRecordSize)...)
}

// readUser loads the u64 at src+off of the target's memory into dst
// (through the stack slot at fp-8, with R1 to R3 as scratch), or jumps
// to fail if it cannot.
func readUser(dst, src asm.Register, off int32, fail string) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R3, src),
		asm.Add.Imm(asm.R3, off),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, -8),
		asm.Mov.Imm(asm.R2, 8),
		asm.FnProbeReadUser.Call(),
		asm.JNE.Imm(asm.R0, 0, fail),
		asm.LoadMem(dst, asm.RFP, -8, asm.DWord),
	}
}

// Read drains the switches available now, calling fn for each, and
// returns their number. A thread's switches come in order; those of
// threads on different CPUs interleave with a few microseconds of
// disorder in Time.
func (g *Goroutines) Read(fn func(GoSwitch)) int {
	return g.each(goRecordSize, func(time uint64, pid, tid uint32, goid uint64) int {
		fn(GoSwitch{Time: time, PID: pid, TID: tid, GoID: goid})
		return 1
	})
}

// Close removes the probes, then frees the ring. The process continues
// unharmed.
func (g *Goroutines) Close() error {
	return closeAll(&g.links, &g.ring)
}

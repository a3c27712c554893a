package resolve

import (
	"encoding/binary"
	"slices"

	"trueprof/internal/perf"
	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
	"trueprof/internal/unwind"
)

type frameAddr struct {
	addr   uint64
	kernel bool
	// exact: addr is not a return address (the leaf, or an instruction a
	// signal interrupted), so it is not moved back into the call.
	exact bool
}

// threadEntries are the functions where a complete frame-pointer chain
// ends: process and thread start routines of glibc, musl, ld.so and Go.
var threadEntries = map[string]bool{
	"_start": true, "__libc_start_main": true, "__libc_start_call_main": true, "__libc_start_main_impl": true,
	"start_thread": true, "clone": true, "clone3": true, "__clone": true, "__clone3": true,
	"_dl_start": true, "_dl_start_user": true, "_dl_start_final": true, "__start": true,
	"runtime.goexit": true, "runtime.mstart": true, "runtime.mstart0": true, "runtime.rt0_go": true,
	"runtime.goexit.abi0": true, "runtime.mstart.abi0": true, "runtime.rt0_go.abi0": true,
	"runtime.sigtramp": true, "runtime.sigtramp.abi0": true, "_rt0_amd64_linux": true, "_rt0_amd64": true,
}

// maxStack is the kernel's default perf_event_max_stack: a chain this long
// was probably cut.
const maxStack = 127

// Stack interns the call chain of a sample and returns its leaf stack
// node, whether the chain looks truncated and, if so, why. Without
// Options.Unwind the user part is the kernel's frame-pointer walk; otherwise
// it is unwound from the sample's copy of the user stack.
func (r *Resolver) Stack(s *perf.Record) (uint32, bool, trace.UnwindReason, error) {
	fr := r.frames[:0]
	chain := r.chain[:0]
	unwinding := r.opts.Unwind && s.UserABI != 0
	kernel := s.KernelIP()
	nKernel := 0
	for _, a := range s.Callchain {
		switch {
		case a == perf.ContextKernel:
			kernel = true
			continue
		case a == perf.ContextUser:
			kernel = false
			continue
		case a >= perf.ContextMax:
			continue
		}
		if kernel {
			nKernel++
		} else if unwinding {
			chain = append(chain, a)
			continue
		}
		fr = append(fr, frameAddr{addr: a, kernel: kernel})
	}
	r.chain = chain
	reason := trace.UnwindNone
	outermost := false // the walk reached a return address the CFI marks undefined
	if unwinding {
		fr, reason, outermost = r.unwindUser(s, fr, chain)
	} else {
		if len(fr) == 0 {
			fr = append(fr, frameAddr{addr: s.IP, kernel: s.KernelIP()})
		}
		fr = r.repairLeaf(s, fr)
		if len(fr) >= maxStack {
			reason = trace.UnwindMaxDepth
		}
	}
	r.frames = fr

	var parent uint32
	user := 0
	var outerUser uint32
	for i := len(fr) - 1; i >= 0; i-- {
		a := fr[i].addr
		if i > 0 && a > 0 && !fr[i].exact {
			// Callers' addresses are return addresses; the call is the
			// instruction before, which matters for inlining and for calls
			// at the very end of a function.
			a--
		}
		loc, err := r.location(s.PID, a, fr[i].kernel, s.Time)
		if err != nil {
			return 0, false, 0, err
		}
		if !fr[i].kernel {
			if user == 0 {
				outerUser = loc
			}
			user++
		}
		key := [2]uint32{parent, loc}
		id, ok := r.stacks[key]
		if !ok {
			id = uint32(len(r.stacks) + 1)
			if err := r.w.Write(&trace.StackNode{ID: id, Parent: parent, Location: loc}); err != nil {
				return 0, false, 0, err
			}
			r.stacks[key] = id
		}
		parent = id
	}
	var truncated bool
	if unwinding {
		// A walk that ended at a return address the CFI marks undefined
		// reached the outermost frame, named or not; one that reached a
		// thread entry is complete even if it could not step past it.
		complete := r.entry[outerUser] || outermost
		truncated = nKernel >= maxStack || reason == trace.UnwindMaxDepth || (user > 0 && !complete)
	} else {
		truncated = len(fr) >= maxStack || (user > 0 && !r.entry[outerUser])
	}
	switch {
	case !truncated:
		reason = trace.UnwindNone
	case reason == trace.UnwindNone && nKernel >= maxStack:
		reason = trace.UnwindMaxDepth
	case reason == trace.UnwindNone:
		reason = trace.UnwindFPEnded
	}
	return parent, truncated, reason, nil
}

// unwindUser appends to fr the user frames unwound from s's stack copy
// and returns why the walk ended, and whether it reached the thread's
// outermost frame. chain is the user part of the kernel's frame-pointer
// walk, which auto splices in. A walk that ends with the kernel's chain
// (trace.UnwindFPEnded) is complete if that chain reached a thread entry:
// its reason is then left to the caller's check.
func (r *Resolver) unwindUser(s *perf.Record, fr []frameAddr, chain []uint64) ([]frameAddr, trace.UnwindReason, bool) {
	// UserRegs are BP, SP, IP; UserStack starts at SP.
	regs := unwind.Regs{BP: s.UserRegs[0], SP: s.UserRegs[1], IP: s.UserRegs[2], BPValid: true}
	st := unwind.Stack{SP: regs.SP, Data: s.UserStack, Complete: uint64(len(s.UserStack)) < s.UserStackSize}
	r.code = unwindCode{r: r, pid: s.PID, as: r.space(s.PID)}
	walked, reason := unwind.Walk(&r.code, regs, st, chain, r.opts.Mode, r.walked[:0])
	r.walked = walked
	for _, f := range walked {
		fr = append(fr, frameAddr{addr: f.PC, exact: f.Exact})
	}
	if reason == trace.UnwindFPEnded {
		// The kernel's chain decides: complete if it reached an entry.
		return fr, trace.UnwindNone, false
	}
	return fr, reason, reason == trace.UnwindNone
}

// unwindCode gives the unwinder the CFI rows of one process's code.
type unwindCode struct {
	r   *Resolver
	pid uint32
	as  *addrSpace
}

// Row implements unwind.Code: file code and [vdso] have their .eh_frame
// rows; JIT code and code in files that cannot be read have none and keep
// frame pointers (Go files have no .eh_frame for their Go code).
func (c *unwindCode) Row(pc uint64) (symbolize.UnwindRow, unwind.Kind, error) {
	m := c.as.find(pc)
	if m == nil {
		if c.r.jit[c.pid] != nil {
			return symbolize.UnwindRow{}, unwind.KindFP, symbolize.ErrNoCFI // JIT code mapped unseen
		}
		return symbolize.UnwindRow{}, unwind.KindUnmapped, nil
	}
	if m.Path == "[vdso]" {
		if vd := c.r.vdsoFile(); vd.err == nil {
			row, err := vd.f.UnwindRow(pc - m.Start + m.PgOff)
			return row, unwind.KindFile, err
		}
	}
	if isAnon(m.Path) || isSpecial(m.Path) {
		return symbolize.UnwindRow{}, unwind.KindFP, symbolize.ErrNoCFI
	}
	mf := c.r.file(c.pid, m)
	if mf.err != nil {
		return symbolize.UnwindRow{}, unwind.KindFP, symbolize.ErrNoCFI
	}
	row, err := mf.f.UnwindRow(pc - m.Start + m.PgOff)
	if err != nil && mf.f.IsGo() {
		return row, unwind.KindFP, err
	}
	return row, unwind.KindFile, err
}

// repairLeaf inserts the caller that a frame-pointer walk skips when the
// innermost user function had no frame of its own at the sampled
// instruction: a frameless leaf (GCC's default for leaves, even with
// -fno-omit-frame-pointer), or any function in its prologue or epilogue.
// There %rbp still holds the caller's frame, so the kernel's walk goes
// from the leaf straight to the caller's caller. The function's CFI says
// where the return address is relative to %rsp, and the sample carries
// the top of the user stack to read it from.
func (r *Resolver) repairLeaf(s *perf.Record, fr []frameAddr) []frameAddr {
	if s.UserABI == 0 || len(s.UserStack) == 0 {
		return fr
	}
	u := slices.IndexFunc(fr, func(f frameAddr) bool { return !f.kernel })
	ip := s.UserRegs[2] // UserRegs are BP, SP, IP; UserStack starts at SP
	if u < 0 || fr[u].addr != ip {
		return fr
	}
	as := r.space(s.PID)
	m := as.find(ip)
	if m == nil || isAnon(m.Path) || isSpecial(m.Path) {
		return fr
	}
	mf := r.file(s.PID, m)
	if mf.err != nil {
		return fr
	}
	rule, ok := mf.f.CFA(ip - m.Start + m.PgOff)
	if !ok || rule.Register != dwarfRegSP {
		return fr
	}
	// The return address is saved just below the CFA.
	off := rule.Offset - 8
	if off < 0 || off+8 > int64(len(s.UserStack)) {
		return fr
	}
	ra := binary.LittleEndian.Uint64(s.UserStack[off:])
	if as.find(ra) == nil || (u+1 < len(fr) && fr[u+1].addr == ra) {
		return fr
	}
	return slices.Insert(fr, u+1, frameAddr{addr: ra})
}

// dwarfRegSP is %rsp in the DWARF register numbering of x86-64.
const dwarfRegSP = 7

package unwind

import (
	"encoding/binary"

	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
)

// Regs are the user registers a sample carries (perf.UserRegsMask).
// BPValid is false when rbp's value is not known to be the caller's
// (after a frame whose CFI gives no rule to recover it).
type Regs struct {
	IP, SP, BP uint64
	BPValid    bool
}

// Stack is the copy of the user stack taken with a sample: Data holds
// the bytes from address SP up. Complete is true when the copy ended at
// the end of the stack mapping (the kernel copied less than asked), so
// nothing above it is stack.
type Stack struct {
	SP       uint64
	Data     []byte
	Complete bool
}

// Frame is one frame of a walked stack. Exact is true when PC is not a
// return address: the sampled instruction, or the one a signal
// interrupted. Other PCs point after their call instruction.
type Frame struct {
	PC    uint64
	Exact bool
}

// Kind is what kind of code an address holds.
type Kind uint8

// Kinds of code.
const (
	// KindFile is code in a file whose CFI rows Code.Row returns.
	KindFile Kind = iota
	// KindFP is code that keeps frame pointers and has no usable CFI:
	// Go, JIT code.
	KindFP
	// KindUnmapped is an address no executable mapping covers.
	KindUnmapped
)

// Code gives the CFI rows of a process's code. Its user (the recorder)
// owns the mappings and the opened files; tests use fakes.
type Code interface {
	// Row returns the CFI row in effect at pc and the kind of code at
	// pc. For KindFile the error wraps symbolize.ErrNoCFI when no FDE
	// covers pc; the row is used only when the error is nil.
	Row(pc uint64) (symbolize.UnwindRow, Kind, error)
}

// Mode selects how code without CFI is walked.
type Mode uint8

// Modes.
const (
	// ModeAuto follows frame pointers through code without CFI and
	// splices in the kernel's frame-pointer chain where it can.
	ModeAuto Mode = iota
	// ModeDWARF uses CFI only, as perf --call-graph dwarf does.
	ModeDWARF
)

// MaxFrames bounds a walk; deeper stacks end with trace.UnwindMaxDepth.
const MaxFrames = 256

// maxSwitch is how far above the copy a CFA may lie and still be taken
// for the same stack, cut by the copy's size: further is another stack.
const maxSwitch = 1 << 20

// DWARF register numbers of x86-64.
const (
	regRBP = 6
	regRSP = 7
	regRIP = 16
)

// walker is the state of one walk.
type walker struct {
	s    Stack
	pc   uint64
	sp   uint64
	bp   uint64
	bpOK bool
	// missed is set by a read outside the copy: an expression that
	// fails after one failed for a short copy, not a corrupt frame.
	missed bool
}

// read returns the 8 bytes at addr of the stack copy.
func (w *walker) read(addr uint64) (uint64, bool) {
	off := addr - w.s.SP
	if addr < w.s.SP || off > uint64(len(w.s.Data)) || uint64(len(w.s.Data))-off < 8 {
		w.missed = true
		return 0, false
	}
	return binary.LittleEndian.Uint64(w.s.Data[off:]), true
}

// reg is the register file CFI expressions see.
func (w *walker) reg(n int) (uint64, bool) {
	switch n {
	case regRSP:
		return w.sp, true
	case regRBP:
		return w.bp, w.bpOK
	case regRIP:
		return w.pc, true
	}
	return 0, false
}

// Walk unwinds the user stack of a sample from r and the copy s,
// appending to out the frames from the sampled instruction outwards, and
// returns them with why the walk ended: trace.UnwindNone when it reached
// the outermost frame (a return address the CFI marks undefined), or the
// reason it could not go on. kernelUser is the user part of the kernel's
// frame-pointer chain of the same sample (its first entry the sampled
// IP), which ModeAuto splices in where the copy cannot go on (no CFI and
// no usable frame pointer, or a copy too short) at an address the chain
// holds, and then returns trace.UnwindFPEnded; nil if none. Walk takes at
// most MaxFrames steps, and each strictly raises the stack pointer.
func Walk(c Code, r Regs, s Stack, kernelUser []uint64, mode Mode, out []Frame) ([]Frame, trace.UnwindReason) {
	w := walker{s: s, pc: r.IP, sp: r.SP, bp: r.BP, bpOK: r.BPValid}
	exact := true
	for depth := 0; ; depth++ {
		if depth == MaxFrames {
			return out, trace.UnwindMaxDepth
		}
		out = append(out, Frame{PC: w.pc, Exact: exact})
		lookup := w.pc
		if !exact {
			// A return address may lie past the end of a function that
			// ends with a call (noreturn callees): the call is before it.
			lookup--
		}
		row, kind, err := c.Row(lookup)
		var cfa, ra uint64
		var reason trace.UnwindReason
		var outermost bool
		switch {
		case kind == KindUnmapped:
			if depth > 0 {
				// The previous step read a return address that is no code.
				return out, trace.UnwindBadFrame
			}
			return out, trace.UnwindUnmapped
		case kind == KindFile && err == nil:
			cfa, ra, reason, outermost = w.stepCFI(row)
			if outermost {
				return out, trace.UnwindNone
			}
		default:
			if mode == ModeDWARF {
				return out, trace.UnwindNoCFI
			}
			// The frame pointer steps as the kernel's walk did, and the
			// walk goes on with the caller's CFI.
			cfa, ra, reason = w.stepFP()
		}
		if mode == ModeAuto && (reason == trace.UnwindNoCFI || reason == trace.UnwindStackShort) {
			// The kernel's chain may go on where the copy cannot.
			if rest, ok := splice(w.pc, depth, kernelUser); ok {
				for _, pc := range rest {
					if len(out) == MaxFrames {
						return out, trace.UnwindMaxDepth
					}
					out = append(out, Frame{PC: pc})
				}
				return out, trace.UnwindFPEnded
			}
		}
		if reason != trace.UnwindNone {
			return out, reason
		}
		if ra == 0 {
			return out, trace.UnwindBadFrame
		}
		exact = row.Signal && kind == KindFile && err == nil
		w.sp, w.pc = cfa, ra
	}
}

// splice returns the part of the kernel's chain after pc, when pc is in
// it: at its start for the first frame, anywhere after it otherwise.
func splice(pc uint64, depth int, kernelUser []uint64) ([]uint64, bool) {
	if len(kernelUser) == 0 {
		return nil, false
	}
	if depth == 0 {
		if kernelUser[0] == pc {
			return kernelUser[1:], true
		}
		return nil, false
	}
	for j := 1; j < len(kernelUser); j++ {
		if kernelUser[j] == pc {
			return kernelUser[j+1:], true
		}
	}
	return nil, false
}

// stepCFI computes the caller's CFA (its stack pointer) and return
// address from a CFI row, and updates rbp. outermost is true, with no
// reason, when the row marks the return address undefined.
func (w *walker) stepCFI(row symbolize.UnwindRow) (cfa, ra uint64, reason trace.UnwindReason, outermost bool) {
	if row.RA.Kind == symbolize.RuleUndefined {
		return 0, 0, trace.UnwindNone, true
	}
	w.missed = false
	switch row.CFA.Kind {
	case symbolize.RuleRegOffset:
		base, ok := w.reg(int(row.CFA.Reg))
		if !ok || row.CFA.Reg == regRIP {
			return 0, 0, trace.UnwindBadFrame, false // DRAP prologues (CFA in r10), or rbp unknown
		}
		cfa = base + uint64(row.CFA.Offset)
	case symbolize.RuleCFAExpr:
		v, err := symbolize.EvalExpr(row.CFA.Expr, nil, w.reg, w.read)
		if err != nil {
			return 0, 0, w.failure(), false
		}
		cfa = v
	default:
		return 0, 0, trace.UnwindBadFrame, false
	}
	if cfa <= w.sp {
		return 0, 0, trace.UnwindBadFrame, false
	}
	if end := w.s.SP + uint64(len(w.s.Data)); cfa > end {
		// The CFA is beyond the copy: the caller's frame is on another
		// stack, or the copy was too short.
		if w.s.Complete || cfa-end > maxSwitch {
			return 0, 0, trace.UnwindStackSwitch, false
		}
		return 0, 0, trace.UnwindStackShort, false
	}
	var ok bool
	if ra, ok = w.recover(row.RA, cfa); !ok {
		return 0, 0, w.failure(), false
	}
	switch row.RBP.Kind {
	case symbolize.RuleUnset, symbolize.RuleSame:
	case symbolize.RuleOffset, symbolize.RuleExpr:
		if row.RBP.Kind == symbolize.RuleOffset && cfa+uint64(row.RBP.Offset) < w.sp {
			// A slot below the stack pointer was popped already: LLVM's
			// epilogues say CFA=rsp+8 after pop %rbp but keep the rule
			// that rbp is saved, and rbp holds the caller's value again.
			break
		}
		w.bp, w.bpOK = w.recover(row.RBP, cfa)
	default:
		w.bpOK = false
	}
	return cfa, ra, trace.UnwindNone, false
}

// recover reads a register saved by rule r in a frame whose CFA is cfa.
// ok is false when the rule is not one of the saved-at kinds, when its
// expression fails or when the read is outside the copy.
func (w *walker) recover(r symbolize.Rule, cfa uint64) (v uint64, ok bool) {
	var addr uint64
	switch r.Kind {
	case symbolize.RuleOffset:
		addr = cfa + uint64(r.Offset)
	case symbolize.RuleExpr:
		a, err := symbolize.EvalExpr(r.Expr, &cfa, w.reg, w.read)
		if err != nil {
			return 0, false
		}
		addr = a
	default:
		return 0, false
	}
	return w.read(addr)
}

// failure is the reason a step failed: a short copy when a read fell
// outside it, else a frame the CFI cannot describe.
func (w *walker) failure() trace.UnwindReason {
	if w.missed {
		return trace.UnwindStackShort
	}
	return trace.UnwindBadFrame
}

// stepFP follows the frame pointer: the caller's return address and
// rbp are saved at rbp+8 and rbp, and its stack pointer is rbp+16.
func (w *walker) stepFP() (cfa, ra uint64, reason trace.UnwindReason) {
	if !w.bpOK || w.bp%8 != 0 || w.bp < w.sp {
		return 0, 0, trace.UnwindNoCFI
	}
	ra, ok1 := w.read(w.bp + 8)
	bp, ok2 := w.read(w.bp)
	if !ok1 || !ok2 {
		return 0, 0, trace.UnwindStackShort
	}
	cfa = w.bp + 16
	w.bp = bp
	return cfa, ra, trace.UnwindNone
}

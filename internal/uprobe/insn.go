package uprobe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/arch/x86/x86asm"
)

// insn is one decoded instruction of a function.
type insn struct {
	off    int // from the function's start
	len    int
	op     x86asm.Op
	target int  // branch target, from the function's start; valid if direct
	direct bool // a branch or call with a relative target
	// writesSP reports an instruction that changes %rsp other than a call
	// (push, pop, sub, add, lea, mov, ...).
	writesSP bool
	// ripRef and immRef are the addresses the instruction names other
	// than as a branch target, either of which may take a function's
	// address: a RIP-relative operand (from the function's start, with
	// hasRIP) and an immediate (absolute, with hasImm). One instruction
	// can hold both (movq $f, var(%rip)), so each has its own field.
	ripRef, immRef int64
	hasRIP, hasImm bool
	// dst is the register the instruction names as its destination (its
	// first operand, in Intel order), 0 for none; indexed says that an
	// operand is memory with an index register (a table's entry); slot,
	// that a MOV's source or a JMP's target is memory at a base register
	// and displacement alone (a pointer's slot: pointerJump).
	dst     x86asm.Reg
	indexed bool
	slot    bool
	raw     []byte
}

// The CET landing pads, which x86asm does not decode.
var (
	endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	endbr32 = []byte{0xf3, 0x0f, 0x1e, 0xfb}
)

// opEndbr stands for endbr64 and endbr32, which x86asm does not name.
const opEndbr = x86asm.Op(^uint32(0) >> 1)

// opMeasured stands for an instruction x86asm does not decode, measured
// by its encoding (vexLen, systemLen): not a branch or a call.
const opMeasured = opEndbr - 1

// maxFuncInsns bounds the instructions decodeFunc keeps of one
// function, about 90 bytes each: 16 MiB of code (maxIndexCode, and what
// symbolize.File.Code reads at most) of one-byte instructions would be
// 16 million.
const maxFuncInsns = 1 << 20

// maxPrologue bounds how far into a function the entry probe may move.
const maxPrologue = 16

// decodeFunc disassembles code, the bytes of one function, by linear
// sweep. Compilers put no data inside x86-64 functions (Go's jump tables
// and gcc's switch tables live in read-only data), so the sweep finds every
// instruction boundary; an undecodable byte is an error because a probe
// placed off an instruction boundary would corrupt the program.
//
// It refuses a function of more than maxFuncInsns instructions, whose
// decoded form would take more than about 100 MB.
func decodeFunc(code []byte) ([]insn, error) {
	var out []insn
	for off := 0; off < len(code); {
		if len(out) == maxFuncInsns {
			return out, fmt.Errorf("more than %d instructions", maxFuncInsns)
		}
		if bytes.HasPrefix(code[off:], endbr64) || bytes.HasPrefix(code[off:], endbr32) {
			// x86asm does not know the CET landing pads.
			out = append(out, insn{off: off, len: 4, op: opEndbr, raw: code[off : off+4]})
			off += 4
			continue
		}
		if n, rip, ok := vexLen(code[off:]); ok {
			// x86asm decodes no VEX or EVEX instruction (AVX): only their
			// length matters, none being a branch or a call. One may
			// write a general register (vmovq %xmm0, %rsp): writesSP
			// says it might.
			d := insn{off: off, len: n, op: opMeasured, writesSP: true, raw: code[off : off+n]}
			if rip != nil {
				d.ripRef, d.hasRIP = int64(off+n)+*rip, true
			}
			out = append(out, d)
			off += n
			continue
		}
		in, err := x86asm.Decode(code[off:], 64)
		if err == nil && in.Op == 0 {
			// x86asm returns a bare prefix for truncated or unknown
			// encodings.
			err = errors.New("unknown instruction")
		}
		if n, ok := systemLen(code[off:]); err != nil && ok {
			out = append(out, insn{off: off, len: n, op: opMeasured, writesSP: true, raw: code[off : off+n]})
			off += n
			continue
		}
		if err != nil {
			if allPadding(code[off:]) {
				break // zero padding after the last instruction
			}
			return out, fmt.Errorf("%w at +%#x: %v", errDecode, off, err)
		}
		d := insn{off: off, len: in.Len, op: in.Op, raw: code[off : off+in.Len]}
		if rel, ok := in.Args[0].(x86asm.Rel); ok {
			d.target = off + in.Len + int(rel)
			d.direct = true
		}
		for i, a := range in.Args {
			switch a := a.(type) {
			case x86asm.Mem:
				if a.Base == x86asm.RIP {
					d.ripRef, d.hasRIP = int64(off+in.Len)+a.Disp, true
				}
				d.indexed = d.indexed || a.Index != 0
				d.slot = d.slot || a.Base != 0 && a.Index == 0 && a.Segment == 0 &&
					(in.Op == x86asm.MOV && i == 1 || in.Op == x86asm.JMP && i == 0)
			case x86asm.Imm:
				d.immRef, d.hasImm = int64(a), true
			}
		}
		if r, ok := in.Args[0].(x86asm.Reg); ok {
			d.dst = r
		}
		if in.Op == x86asm.PUSH || in.Op == x86asm.POP || in.Op == x86asm.LEAVE {
			d.writesSP = true
		} else if r, ok := in.Args[0].(x86asm.Reg); ok && (r == x86asm.RSP || r == x86asm.ESP || r == x86asm.SP) &&
			in.Op != x86asm.CMP && in.Op != x86asm.TEST && in.Op != x86asm.BT {
			// Args are in Intel order: the first is the destination.
			d.writesSP = true
		}
		out = append(out, d)
		off += in.Len
	}
	return out, nil
}

// vexLen returns the length of the VEX (c4, c5) or EVEX (62) encoded
// instruction b starts with, none of which is a branch: its prefix, its
// opcode, a ModRM byte (except vzeroupper and vzeroall, c5/c4 map 1
// opcode 77), the SIB byte and displacement the ModRM byte asks for,
// and an 8-bit immediate for opcode map 3 and the few map 1 opcodes that
// take one (Intel SDM vol. 2, 2.3 and 2.7), with the displacement of
// its RIP-relative operand if it has one. In 64-bit mode these bytes
// begin nothing else: LES, LDS and BOUND are invalid there. It reports
// false for anything else, including maps it does not know.
func vexLen(b []byte) (n int, rip *int64, ok bool) {
	if len(b) < 2 {
		return 0, nil, false
	}
	mmap := 0 // the opcode map
	switch b[0] {
	case 0xc5:
		n, mmap = 2, 1
	case 0xc4:
		if len(b) < 3 {
			return 0, nil, false
		}
		n, mmap = 3, int(b[1]&0x1f)
	case 0x62:
		if len(b) < 4 || b[2]&0x04 == 0 { // EVEX's P1 has bit 2 set
			return 0, nil, false
		}
		n, mmap = 4, int(b[1]&0x07)
	default:
		return 0, nil, false
	}
	if mmap < 1 || mmap > 3 || len(b) < n+1 {
		return 0, nil, false
	}
	op := b[n]
	n++ // the opcode
	if b[0] != 0x62 && mmap == 1 && op == 0x77 {
		return n, nil, true // vzeroupper, vzeroall: no ModRM
	}
	if len(b) < n+1 {
		return 0, nil, false
	}
	modrm := b[n]
	n++
	mod, rm := modrm>>6, modrm&7
	if mod != 3 {
		if rm == 4 {
			if len(b) < n+1 {
				return 0, nil, false
			}
			if mod == 0 && b[n]&7 == 5 {
				n += 4 // SIB without base: disp32
			}
			n++
		}
		switch {
		case mod == 1:
			n++
		case mod == 0 && rm == 5:
			if len(b) >= n+4 {
				d := int64(int32(binary.LittleEndian.Uint32(b[n:])))
				rip = &d
			}
			n += 4
		case mod == 2:
			n += 4
		}
	}
	if mmap == 3 || mmap == 1 && (op >= 0x70 && op <= 0x73 || op >= 0xc2 && op <= 0xc6 && op != 0xc3) {
		n++
	}
	if n > len(b) {
		return 0, nil, false
	}
	return n, rip, true
}

// systemLen returns the length of the instruction b starts with if it
// is one of the few register-only instructions that libraries run and
// x86asm does not decode: rdsspd/q and incsspd/q (CET shadow stacks,
// in libgcc's _Unwind_RaiseException), rdseed and rdpid (libstdc++'s
// random_device), rdpkru and wrpkru (glibc's pkey_get, pkey_set). Their
// operands are registers only (ModRM mod 3): no displacement or
// immediate follows.
func systemLen(b []byte) (int, bool) {
	n := 0
	if n < len(b) && (b[n] == 0xf3 || b[n] == 0x66) {
		n++
	}
	if n < len(b) && b[n]&0xf0 == 0x40 { // REX
		n++
	}
	if len(b) < n+3 || b[n] != 0x0f {
		return 0, false
	}
	op, modrm := b[n+1], b[n+2]
	switch {
	case b[0] == 0xf3 && op == 0x1e && modrm&0xf8 == 0xc8: // rdssp
	case b[0] == 0xf3 && op == 0xae && modrm&0xf8 == 0xe8: // incssp
	case op == 0xc7 && modrm&0xf8 == 0xf8: // rdseed, rdpid (f3)
	case n == 0 && op == 0x01 && (modrm == 0xee || modrm == 0xef): // rdpkru, wrpkru
	default:
		return 0, false
	}
	return n + 3, true
}

func allPadding(b []byte) bool {
	for _, c := range b {
		if c != 0xcc && c != 0 {
			return false
		}
	}
	return true
}

// emulated reports whether the kernel executes a uprobe on the instruction
// whose bytes are b without single-stepping it out of line. On x86-64 it
// emulates push of a register, nop and relative jmp, jcc and call
// (arch/x86/kernel/uprobes.c); every other instruction, endbr64, ret, pop
// and mov %rsp,%rbp included, takes a second trap. Measured here (Linux
// 6.18, VM): push %rbp 0.57 µs, nop 0.7 µs, endbr64, ret or mov 11-15 µs a
// hit (see Cost).
func emulated(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	switch {
	case len(b) == 1 && b[0] >= 0x50 && b[0] <= 0x57: // push %rax..%rdi
		return true
	case len(b) == 2 && b[0] == 0x41 && b[1] >= 0x50 && b[1] <= 0x57: // push %r8..%r15
		return true
	case len(b) == 1 && b[0] == 0x90: // nop
		return true
	case b[0] == 0x0f && len(b) >= 3 && b[1] == 0x1f: // nopl
		return true
	case b[0] == 0xe8 || b[0] == 0xe9 || b[0] == 0xeb: // call, jmp
		return true
	case b[0] >= 0x70 && b[0] <= 0x7f: // jcc rel8
		return true
	case b[0] == 0x0f && len(b) == 6 && b[1] >= 0x80 && b[1] <= 0x8f: // jcc rel32
		return true
	}
	return false
}

// isBranch reports control transfers other than calls.
func isBranch(op x86asm.Op) bool {
	switch op {
	case x86asm.JMP, x86asm.RET, x86asm.LRET, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ,
		x86asm.SYSRET, x86asm.UD2, x86asm.HLT, x86asm.INT:
		return true
	}
	return isCondJump(op)
}

func isCondJump(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE,
		x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JS, x86asm.JCXZ, x86asm.JECXZ, x86asm.JRCXZ,
		x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		return true
	}
	return false
}

// chooseEntry returns the index of the instruction where the entry probe
// goes: the first emulated instruction on the straight path from the
// function's start that runs exactly once per call, or 0 (the start) when
// there is none. The path may cross a conditional branch that leads to a
// block jumping back to the start without other branches: Go's
// stack-growth check (cmp 0x10(%r14),%rsp; jbe L; ... L: call
// runtime.morestack; jmp start), whose re-execution must not count twice.
// No branch may land between the start and the chosen instruction.
//
// The probe may be an emulated forward conditional jump, which runs once
// per call taken or not: a frameless leaf's test-and-skip at its start
// (test %rdi,%rdi; jle out). With retprobe, a return probe shares the
// entry probe's address and reads the return address from the top of the
// stack, so the path stops where the stack pointer first changes; without
// it (exits probed on RET instructions), the path goes on.
func chooseEntry(ins []insn, retprobe bool) int {
	if len(ins) == 0 || emulated(ins[0].raw) {
		return 0
	}
	landing := map[int]bool{}
	byOff := make(map[int]int, len(ins))
	for i, in := range ins {
		byOff[in.off] = i
		if in.direct && in.target != 0 {
			landing[in.target] = true
		}
	}
	for k := 0; k < len(ins) && k < maxPrologue; k++ {
		in := ins[k]
		if k > 0 && landing[in.off] {
			return 0
		}
		if emulated(in.raw) && in.op != x86asm.CALL && !isBranch(in.op) {
			return k
		}
		switch {
		case in.op == x86asm.CALL, retprobe && in.writesSP:
			return 0
		case isCondJump(in.op):
			if !in.direct {
				return 0
			}
			if restarts(ins, byOff, in.target) {
				continue // Go's stack check: past it, the path runs once
			}
			if emulated(in.raw) && in.target > in.off {
				// Taken or not, this jump runs once per call and never
				// returns to the start.
				return k
			}
			return 0
		case isBranch(in.op):
			return 0
		}
	}
	return 0
}

// restarts reports whether the block at target ends with a jump back to
// the function's start and contains no other branch (calls allowed).
func restarts(ins []insn, byOff map[int]int, target int) bool {
	i, ok := byOff[target]
	if !ok {
		return false
	}
	for ; i < len(ins); i++ {
		in := ins[i]
		switch {
		case in.op == x86asm.JMP:
			return in.direct && in.target == 0
		case isBranch(in.op):
			return false
		}
	}
	return false
}

// exitInsns returns the offsets, from the function's start, of the
// instructions a function leaves by: every RET, and every direct JMP
// whose target (from the function's start) is not inside its code (a
// tail call). within gives a function's own bytes as inside.
func exitInsns(ins []insn, inside func(target int) bool) []int {
	var exits []int
	for _, in := range ins {
		switch {
		case in.op == x86asm.RET:
			exits = append(exits, in.off)
		case in.op == x86asm.JMP && in.direct && !inside(in.target):
			exits = append(exits, in.off)
		}
	}
	return exits
}

// within returns exitInsns' inside for a function of size bytes.
func within(size int) func(target int) bool {
	return func(target int) bool { return target >= 0 && target < size }
}

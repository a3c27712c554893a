package unwind

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
)

// fakeFunc is a range of code with one CFI row (or none).
type fakeFunc struct {
	lo, hi uint64
	kind   Kind
	row    symbolize.UnwindRow
	noCFI  bool
}

// fakeCode is a Code over hand-made functions.
type fakeCode []fakeFunc

func (c fakeCode) Row(pc uint64) (symbolize.UnwindRow, Kind, error) {
	for _, f := range c {
		if pc >= f.lo && pc < f.hi {
			if f.noCFI {
				return symbolize.UnwindRow{}, f.kind, symbolize.ErrNoCFI
			}
			return f.row, f.kind, nil
		}
	}
	return symbolize.UnwindRow{}, KindUnmapped, nil
}

// Rows as compilers emit them.
var (
	raAt8 = symbolize.Rule{Kind: symbolize.RuleOffset, Offset: -8}
	// rspRow: a function whose frame is off bytes from the CFA.
	rspRow = func(off int64) symbolize.UnwindRow {
		return symbolize.UnwindRow{CFA: symbolize.Rule{Kind: symbolize.RuleRegOffset, Reg: regRSP, Offset: off}, RA: raAt8}
	}
	// rbpRow: after push %rbp; mov %rsp,%rbp.
	rbpRow = symbolize.UnwindRow{
		CFA: symbolize.Rule{Kind: symbolize.RuleRegOffset, Reg: regRBP, Offset: 16}, RA: raAt8,
		RBP: symbolize.Rule{Kind: symbolize.RuleOffset, Offset: -16},
	}
	outerRow = symbolize.UnwindRow{CFA: symbolize.Rule{Kind: symbolize.RuleRegOffset, Reg: regRSP, Offset: 8},
		RA: symbolize.Rule{Kind: symbolize.RuleUndefined}}
	// pltRow is the .plt section's row: rsp+8, or rsp+16 from offset 11
	// of a 16-byte entry on (after its push).
	pltRow = symbolize.UnwindRow{CFA: symbolize.Rule{Kind: symbolize.RuleCFAExpr,
		Expr: []byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}}, RA: raAt8}
	// sigRow is glibc's __restore_rt: the interrupted registers are in
	// the ucontext on the stack (rsp at +160, rbp at +120, rip at +168).
	sigRow = symbolize.UnwindRow{
		CFA:    symbolize.Rule{Kind: symbolize.RuleCFAExpr, Expr: []byte{0x77, 0xa0, 0x01, 0x06}},
		RA:     symbolize.Rule{Kind: symbolize.RuleExpr, Expr: []byte{0x77, 0xa8, 0x01}},
		RBP:    symbolize.Rule{Kind: symbolize.RuleExpr, Expr: []byte{0x77, 0xf8, 0x00}},
		Signal: true,
	}
)

// Code addresses of the fake program.
const (
	fnStart  = 0x1000 // outermost: return address undefined
	fnMain   = 0x2000 // rsp+32
	fnWork   = 0x3000 // rbp-based
	fnLeaf   = 0x4000 // rsp+8
	fnPLT    = 0x5000
	fnSig    = 0x6000
	fnJIT    = 0x7000 // no CFI, frame pointer
	fnGo     = 0x8000 // no CFI (KindFP)
	fnRec    = 0x9000 // rsp+16, recursive
	fnBroken = 0xa000 // CFA = rsp
	fnDRAP   = 0xb000 // CFA = r10+0
	fnEpi    = 0xc000 // after pop %rbp: CFA=rsp+8, rbp still "saved" at CFA-16
)

var code = fakeCode{
	{lo: fnStart, hi: fnStart + 0x100, row: outerRow},
	{lo: fnMain, hi: fnMain + 0x100, row: rspRow(32)},
	{lo: fnWork, hi: fnWork + 0x100, row: rbpRow},
	{lo: fnLeaf, hi: fnLeaf + 0x100, row: rspRow(8)},
	{lo: fnPLT, hi: fnPLT + 0x100, row: pltRow},
	{lo: fnSig - 1, hi: fnSig + 0x10, row: sigRow},
	{lo: fnJIT, hi: fnJIT + 0x100, kind: KindFP, noCFI: true},
	{lo: fnGo, hi: fnGo + 0x100, kind: KindFP, noCFI: true},
	{lo: fnRec, hi: fnRec + 0x100, row: rspRow(16)},
	{lo: fnBroken, hi: fnBroken + 0x100, row: rspRow(0)},
	{lo: fnDRAP, hi: fnDRAP + 0x100, row: symbolize.UnwindRow{CFA: symbolize.Rule{Kind: symbolize.RuleRegOffset, Reg: 10}, RA: raAt8}},
	{lo: fnEpi, hi: fnEpi + 0x100, row: symbolize.UnwindRow{CFA: rspRow(8).CFA, RA: raAt8, RBP: rbpRow.RBP}},
}

const stackTop = 0x7fff0000 // SP of every synthetic sample

// stackImage builds a stack copy from stackTop up.
type stackImage struct{ data []byte }

func newStack(n int) *stackImage { return &stackImage{data: make([]byte, n)} }

// put stores v at addr.
func (s *stackImage) put(addr, v uint64) *stackImage {
	binary.LittleEndian.PutUint64(s.data[addr-stackTop:], v)
	return s
}

func (s *stackImage) stack() Stack { return Stack{SP: stackTop, Data: s.data} }

func pcs(fr []Frame) []string {
	var out []string
	for _, f := range fr {
		e := ""
		if f.Exact {
			e = "!"
		}
		out = append(out, fmt.Sprintf("%#x%s", f.PC, e))
	}
	return out
}

func TestWalk(t *testing.T) {
	sp := uint64(stackTop)
	// leaf (rsp+8) <- main (rsp+32) <- start.
	plain := newStack(256).put(sp, fnMain+0x10).put(sp+8+24, fnStart+5)
	// work (rbp: frame at sp+16) <- main <- start.
	rbpStack := newStack(256).put(sp+16, 0x1234).put(sp+24, fnMain+0x20).put(sp+32+24, fnStart+5)
	// handler leaf (rsp+8) <- __restore_rt (ucontext at sp+8) <- interrupted
	// work (rbp frame at sp+400) <- main <- start.
	sig := newStack(1024).put(sp, fnSig).put(sp+8+160, sp+300).put(sp+8+168, fnWork+0x33).put(sp+8+120, sp+400).
		put(sp+400, 0x1234).put(sp+408, fnMain+0x20).put(sp+416+24, fnStart+5)
	// leaf <- JIT (frame pointer at sp+32) <- main <- start.
	jit := newStack(256).put(sp, fnJIT+0x10).put(sp+32, 0x4321).put(sp+40, fnMain+0x10).put(sp+48+24, fnStart+5)
	// recursion deeper than MaxFrames.
	rec := newStack(16 * (MaxFrames + 4))
	for a := sp + 8; a < sp+uint64(len(rec.data)); a += 16 {
		rec.put(a, fnRec+0x10)
	}
	tests := []struct {
		name       string
		regs       Regs
		st         Stack
		kernelUser []uint64
		mode       Mode
		want       []string
		reason     trace.UnwindReason
	}{
		{"rsp chain to an undefined return address", Regs{IP: fnLeaf + 4, SP: sp}, plain.stack(), nil, ModeDWARF,
			[]string{"0x4004!", "0x2010", "0x1005"}, trace.UnwindNone},
		{"rbp-based CFA", Regs{IP: fnWork + 8, SP: sp, BP: sp + 16, BPValid: true}, rbpStack.stack(), nil, ModeDWARF,
			[]string{"0x3008!", "0x2020", "0x1005"}, trace.UnwindNone},
		{"rbp-based CFA without a known rbp", Regs{IP: fnWork + 8, SP: sp, BP: sp + 16}, rbpStack.stack(), nil, ModeDWARF,
			[]string{"0x3008!"}, trace.UnwindBadFrame},
		{"LLVM epilogue: rbp popped, its rule kept", Regs{IP: fnEpi, SP: sp, BP: sp + 16, BPValid: true},
			newStack(256).put(sp, fnWork+0x10).put(sp+16, 0x1234).put(sp+24, fnMain+0x20).put(sp+32+24, fnStart+5).stack(), nil, ModeDWARF,
			[]string{"0xc000!", "0x3010", "0x2020", "0x1005"}, trace.UnwindNone},
		{"PLT at offset 0", Regs{IP: fnPLT, SP: sp}, plain.stack(), nil, ModeDWARF,
			[]string{"0x5000!", "0x2010", "0x1005"}, trace.UnwindNone},
		{"PLT at offset 6", Regs{IP: fnPLT + 6, SP: sp}, plain.stack(), nil, ModeDWARF,
			[]string{"0x5006!", "0x2010", "0x1005"}, trace.UnwindNone},
		{"PLT at offset 11 (after the push)", Regs{IP: fnPLT + 11, SP: sp - 8}, Stack{SP: sp - 8, Data: append(make([]byte, 8), plain.data...)}, nil, ModeDWARF,
			[]string{"0x500b!", "0x2010", "0x1005"}, trace.UnwindNone},
		{"signal frame, then the exact interrupted instruction", Regs{IP: fnLeaf, SP: sp}, sig.stack(), nil, ModeDWARF,
			[]string{"0x4000!", "0x6000", "0x3033!", "0x2020", "0x1005"}, trace.UnwindNone},
		{"JIT frame-pointer step between CFI frames", Regs{IP: fnLeaf, SP: sp, BP: sp + 32, BPValid: true}, jit.stack(), nil, ModeAuto,
			[]string{"0x4000!", "0x7010", "0x2010", "0x1005"}, trace.UnwindNone},
		{"JIT without CFI in dwarf mode", Regs{IP: fnLeaf, SP: sp, BP: sp + 32, BPValid: true}, jit.stack(), nil, ModeDWARF,
			[]string{"0x4000!", "0x7010"}, trace.UnwindNoCFI},
		{"JIT with a bad frame pointer", Regs{IP: fnLeaf, SP: sp, BP: sp + 33, BPValid: true}, jit.stack(), nil, ModeAuto,
			[]string{"0x4000!", "0x7010"}, trace.UnwindNoCFI},
		{"splice into the kernel's chain at the leaf (Go)", Regs{IP: fnGo, SP: sp}, plain.stack(), []uint64{fnGo, fnGo + 0x50, 0x99}, ModeAuto,
			[]string{"0x8000!", "0x8050", "0x99"}, trace.UnwindFPEnded},
		{"splice after a CFI frame", Regs{IP: fnLeaf, SP: sp}, newStack(64).put(sp, fnGo+0x50).stack(), []uint64{fnLeaf + 1, fnGo + 0x50, 0x99}, ModeAuto,
			[]string{"0x4000!", "0x8050", "0x99"}, trace.UnwindFPEnded},
		{"stack copy too short", Regs{IP: fnLeaf, SP: sp}, Stack{SP: sp, Data: plain.data[:16]}, nil, ModeDWARF,
			[]string{"0x4000!", "0x2010"}, trace.UnwindStackShort},
		{"sigaltstack: the interrupted stack is far away", Regs{IP: fnLeaf, SP: sp},
			newStack(1024).put(sp, fnSig).put(sp+8+160, sp+10<<20).put(sp+8+168, fnWork).stack(), nil, ModeDWARF,
			[]string{"0x4000!", "0x6000"}, trace.UnwindStackSwitch},
		{"complete copy: a CFA beyond it is another stack", Regs{IP: fnMain, SP: sp}, Stack{SP: sp, Data: plain.data[:16], Complete: true}, nil, ModeDWARF,
			[]string{"0x2000!"}, trace.UnwindStackSwitch},
		{"CFA not above SP", Regs{IP: fnBroken, SP: sp}, plain.stack(), nil, ModeDWARF,
			[]string{"0xa000!"}, trace.UnwindBadFrame},
		{"CFA in a register the sample lacks (DRAP)", Regs{IP: fnDRAP, SP: sp}, plain.stack(), nil, ModeDWARF,
			[]string{"0xb000!"}, trace.UnwindBadFrame},
		{"return address 0", Regs{IP: fnLeaf, SP: sp}, newStack(64).stack(), nil, ModeDWARF,
			[]string{"0x4000!"}, trace.UnwindBadFrame},
		{"unmapped leaf", Regs{IP: 0xdead0000, SP: sp}, plain.stack(), nil, ModeAuto,
			[]string{"0xdead0000!"}, trace.UnwindUnmapped},
		{"return address into no code", Regs{IP: fnLeaf, SP: sp}, newStack(64).put(sp, 0xdead0000).stack(), nil, ModeAuto,
			[]string{"0x4000!", "0xdead0000"}, trace.UnwindBadFrame},
		{"recursion deeper than MaxFrames", Regs{IP: fnRec, SP: sp}, rec.stack(), nil, ModeDWARF, nil, trace.UnwindMaxDepth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := Walk(code, tt.regs, tt.st, tt.kernelUser, tt.mode, nil)
			if reason != tt.reason {
				t.Errorf("reason %q, want %q (frames %v)", reason, tt.reason, pcs(got))
			}
			if tt.want == nil {
				if len(got) != MaxFrames {
					t.Errorf("%d frames, want %d", len(got), MaxFrames)
				}
				return
			}
			if !slices.Equal(pcs(got), tt.want) {
				t.Errorf("frames %v, want %v", pcs(got), tt.want)
			}
		})
	}
}

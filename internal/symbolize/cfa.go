package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// CFARule says how to compute the canonical frame address (CFA) at an
// instruction: the value of the stack pointer just before the call that
// entered the function. A profiler unwinding with frame pointers needs it
// where the function has not set up (or has already torn down) its frame:
// the return address is then at CFA-8 on x86-64, which a stack copy taken
// with the sample can supply.
type CFARule struct {
	Register int   // DWARF register number: 7 = rsp, 6 = rbp on x86-64
	Offset   int64 // CFA = Register + Offset
}

// ReturnOnTop reports whether the CFA is %rsp+8: the return address is
// on top of the stack, as at the function's entry, its frame not set up
// yet or torn down already.
func (r CFARule) ReturnOnTop() bool { return r.Register == dwarfRSP && r.Offset == 8 }

// DWARF register numbers of x86-64 (System V psABI, figure 3.36).
const (
	dwarfRBP = 6
	dwarfRSP = 7
	dwarfRA  = 16 // return address column
)

// maxCFIStack bounds the DW_CFA_remember_state stack. Compilers nest a
// few levels at most; deeper input is treated as malformed.
const maxCFIStack = 16

// DWARF call frame instructions (DWARF 5 section 7.24), by opcode. The
// three primary opcodes keep their operand in the low six bits.
const (
	cfaAdvanceLoc = 0x40 // high two bits 0x1
	cfaOffset     = 0x80 // high two bits 0x2
	cfaRestore    = 0xc0 // high two bits 0x3

	cfaNop                       = 0x00
	cfaSetLoc                    = 0x01
	cfaAdvanceLoc1               = 0x02
	cfaAdvanceLoc2               = 0x03
	cfaAdvanceLoc4               = 0x04
	cfaOffsetExtended            = 0x05
	cfaRestoreExtended           = 0x06
	cfaUndefined                 = 0x07
	cfaSameValue                 = 0x08
	cfaRegister                  = 0x09
	cfaRememberState             = 0x0a
	cfaRestoreState              = 0x0b
	cfaDefCFA                    = 0x0c
	cfaDefCFARegister            = 0x0d
	cfaDefCFAOffset              = 0x0e
	cfaDefCFAExpression          = 0x0f
	cfaExpression                = 0x10
	cfaOffsetExtendedSF          = 0x11
	cfaDefCFASF                  = 0x12
	cfaDefCFAOffsetSF            = 0x13
	cfaValOffset                 = 0x14
	cfaValOffsetSF               = 0x15
	cfaValExpression             = 0x16
	cfaGNUArgsSize               = 0x2e
	cfaGNUNegativeOffsetExtended = 0x2f
	cfaMaxRegister               = 0xffff // larger register numbers are malformed
)

// cfaTable finds the FDE of an address and runs its CFI program.
type cfaTable struct {
	r    ehReader  // over the whole section; copied for each evaluation
	fdes []fdeInfo // sorted by lo
	// next is consulted for addresses no FDE here covers: the
	// .debug_frame of the file or of its separate debug file.
	next *cfaTable
}

// newCFATable indexes the FDEs of an .eh_frame section. It returns nil
// when the section has no FDE; FDEs decoded before an error are kept.
func newCFATable(data []byte, order binary.ByteOrder, ptrSize int, bases ehBases) *cfaTable {
	return newCFITable(ehReader{name: ".eh_frame", data: data, order: order, ptrSize: ptrSize, bases: bases})
}

// newCFITable indexes the FDEs of r's section, .eh_frame or .debug_frame.
func newCFITable(r ehReader) *cfaTable {
	var fdes []fdeInfo
	walkCFI(&r, func(fi fdeInfo) {
		if fi.insn >= 0 {
			fdes = append(fdes, fi)
		}
	})
	if len(fdes) == 0 {
		return nil
	}
	slices.SortFunc(fdes, func(a, b fdeInfo) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	r.err = nil
	return &cfaTable{r: r, fdes: fdes}
}

// RuleKind says how a register of the caller (or the CFA) is recovered
// in one CFI row.
type RuleKind uint8

// Rule kinds. The zero value, RuleUnset, means the CFI gave no rule: for
// callee-saved registers such as rbp that means the value is unchanged.
const (
	RuleUnset     RuleKind = iota
	RuleUndefined          // DW_CFA_undefined: no value (the outermost frame's return address)
	RuleSame               // DW_CFA_same_value
	RuleOffset             // saved at CFA+Offset
	RuleValOffset          // the value is CFA+Offset
	RuleRegister           // the value is in register Reg
	RuleExpr               // saved at the address Expr computes (CFA pushed first)
	RuleValExpr            // the value is what Expr computes (CFA pushed first)
	RuleRegOffset          // CFA only: Reg+Offset
	RuleCFAExpr            // CFA only: the value Expr computes
)

// Rule is one column of a CFI row.
type Rule struct {
	Kind   RuleKind
	Reg    uint16 // RuleRegOffset, RuleRegister: a DWARF register number
	Offset int64
	// Expr is a DWARF expression (RuleExpr, RuleValExpr, RuleCFAExpr), a
	// subslice of the section: callers must not modify it.
	Expr []byte
}

// UnwindRow is the part of a CFI row an x86-64 unwinder needs: how to
// compute the CFA, and how to recover the return address and rbp of the
// caller. Signal is set for signal trampolines (the CIE augmentation 'S'):
// the return address they give is the interrupted instruction itself,
// not the one after a call.
type UnwindRow struct {
	CFA, RA, RBP Rule
	Signal       bool
}

// UnwindRow returns the CFI row in effect at fileOffset (the same kind of
// file offset Resolve takes), evaluating the FDE's program (with its
// CIE's initial instructions) up to that address. It returns an error
// wrapping ErrNoCFI when no FDE covers the address (or the file has no
// usable .eh_frame), ErrUnsupported for files other than x86-64 and CIEs
// whose return address column is not 16, and ErrFormat on malformed CFI.
//
// UnwindRow reads no file and takes no lock once the table is loaded by
// the first call; it costs a binary search and a run of one short CFI
// program.
func (f *File) UnwindRow(fileOffset uint64) (UnwindRow, error) {
	pc, ok := f.VAddr(fileOffset)
	if !ok {
		return UnwindRow{}, fmt.Errorf("%w: offset %#x is in no loaded segment", ErrNoCFI, fileOffset)
	}
	f.cfaOnce.Do(f.loadCFA)
	if f.cfa == nil {
		return UnwindRow{}, fmt.Errorf("%w: %s has no usable .eh_frame", ErrNoCFI, f.base)
	}
	return f.cfa.row(pc)
}

// CFA returns the CFA rule in effect at fileOffset (see UnwindRow), so
// that a frame-pointer unwinder can find the return address of a
// function that has no frame at that instruction. ok is false when
// UnwindRow fails, when the rule is an expression, and unless the return
// address is saved at CFA-8 there: that is what a caller of CFA relies
// on, and it does not hold in signal trampolines or in the outermost
// frame (_start marks its return address undefined).
func (f *File) CFA(fileOffset uint64) (rule CFARule, ok bool) {
	return cfaRule(f.UnwindRow(fileOffset))
}

// cfaRule is the CFA rule of row under CFA's conditions.
func cfaRule(row UnwindRow, err error) (CFARule, bool) {
	if err != nil || row.CFA.Kind != RuleRegOffset || row.RA.Kind != RuleOffset || row.RA.Offset != -8 {
		return CFARule{}, false
	}
	return CFARule{Register: int(row.CFA.Reg), Offset: row.CFA.Offset}, true
}

// loadCFA builds f.cfa, left nil when the file cannot be used: its
// .eh_frame, then the .debug_frame of the file or of its separate debug
// file for the addresses .eh_frame does not cover (code built with
// -fno-asynchronous-unwind-tables -g). Go's .debug_frame is left out: it
// does not describe Go's stack switches, and Go code keeps frame pointers.
func (f *File) loadCFA() {
	if f.elf.Machine != elf.EM_X86_64 || f.elf.Class != elf.ELFCLASS64 {
		return
	}
	var eh *cfaTable
	if sec, err := ehFrameSection(f.elf); err == nil && sec.data != nil {
		eh = newCFATable(sec.data, f.elf.ByteOrder, sec.ptrSize, sec.bases)
	}
	var dbg *cfaTable
	for _, ef := range []*elf.File{f.elf, f.debug} {
		if ef == nil || f.isGo {
			continue
		}
		if s := ef.Section(".debug_frame"); s != nil && s.Type != elf.SHT_NOBITS {
			if data, err := s.Data(); err == nil {
				dbg = newCFITable(ehReader{name: ".debug_frame", data: data, order: ef.ByteOrder, ptrSize: 8, debugFrame: true})
			}
		}
		if dbg != nil {
			break
		}
	}
	switch {
	case eh == nil:
		f.cfa = dbg
	default:
		eh.next = dbg
		f.cfa = eh
	}
}

// lookup returns the CFA rule at vaddr pc, as CFA does.
func (t *cfaTable) lookup(pc uint64) (CFARule, bool) {
	return cfaRule(t.row(pc))
}

// row returns the CFI row at vaddr pc.
func (t *cfaTable) row(pc uint64) (UnwindRow, error) {
	fde := t.fde(pc)
	if fde == nil {
		// Not formatted with pc: in auto mode every frame of code
		// without CFI (Go, frame-pointer code) comes here, per sample.
		return UnwindRow{}, ErrNoCFI
	}
	return t.eval(fde, pc)
}

// fde returns the FDE covering vaddr pc, here or in t.next; nil if none.
func (t *cfaTable) fde(pc uint64) *fdeInfo {
	// The last FDE starting at or before pc.
	lo, hi := 0, len(t.fdes)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if t.fdes[m].lo <= pc {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 || pc >= t.fdes[lo-1].hi {
		if t.next != nil {
			return t.next.fde(pc)
		}
		return nil
	}
	return &t.fdes[lo-1]
}

// FDERange returns the ELF virtual addresses [lo, hi) that the CFI entry
// (FDE) covering vaddr describes: a function, or a part of one (its cold
// part has its own), as the compiler emitted it. ok is false where no
// FDE covers vaddr. Where a symbol's extent is a guess (a symbol without
// a size runs to the next one, across .plt), the FDE tells whether two
// addresses are one function's code.
func (f *File) FDERange(vaddr uint64) (lo, hi uint64, ok bool) {
	f.cfaOnce.Do(f.loadCFA)
	if f.cfa == nil {
		return 0, 0, false
	}
	fde := f.cfa.fde(vaddr)
	if fde == nil {
		return 0, 0, false
	}
	return fde.lo, fde.hi, true
}

// cfiState is the part of a CFI row that UnwindRow returns.
type cfiState struct {
	cfa, ra, rbp Rule
}

// cfiVM runs CFI programs up to a target address.
type cfiVM struct {
	data   []byte   // the whole .eh_frame
	r      ehReader // over data, cut at the end of the running program
	cie    *cieInfo
	loc    uint64 // address of the current row
	target uint64
	done   bool // an advance went past target: the current row is the answer
	cur    cfiState
	init   cfiState // after the CIE's initial instructions, for DW_CFA_restore
	stack  [maxCFIStack]cfiState
	depth  int
}

// errBadCFI is returned for a CFI program that cannot be run.
var errBadCFI = fmt.Errorf("%w: malformed CFI program", ErrFormat)

// eval runs fde's CIE initial instructions, then its own program up to pc.
func (t *cfaTable) eval(fde *fdeInfo, pc uint64) (UnwindRow, error) {
	cie := fde.cie
	if cie.raReg != dwarfRA {
		return UnwindRow{}, fmt.Errorf("%w: return address column %d", ErrUnsupported, cie.raReg)
	}
	vm := cfiVM{data: t.r.data, r: t.r, cie: cie, loc: fde.lo, target: pc}
	if !vm.run(cie.insn, cie.end) {
		return UnwindRow{}, errBadCFI
	}
	vm.init = vm.cur
	if !vm.done && !vm.run(fde.insn, fde.end) {
		return UnwindRow{}, errBadCFI
	}
	s := vm.cur
	if s.cfa.Kind == RuleUnset {
		return UnwindRow{}, errBadCFI
	}
	return UnwindRow{CFA: s.cfa, RA: s.ra, RBP: s.rbp, Signal: cie.signal}, nil
}

// run executes the instructions in r.data[off:end] until their end or an
// advance past the target. It returns false on malformed input.
func (vm *cfiVM) run(off, end int) bool {
	if off < 0 || off > end || end > len(vm.data) {
		return false
	}
	r := &vm.r
	// Cutting the data makes reads past the program fail, while offsets
	// stay those of the section, as pc-relative DW_CFA_set_loc needs.
	r.data, r.off = vm.data[:end], off
	for r.off < end && !vm.done {
		op := r.data[r.off]
		r.off++
		var ok bool
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			ok = vm.advance(uint64(op & 0x3f))
		case cfaOffset:
			ok = vm.setOffset(uint64(op&0x3f), int64(vm.uleb()))
		case cfaRestore:
			ok = vm.restore(uint64(op & 0x3f))
		default:
			ok = vm.extended(op)
		}
		if !ok || r.err != nil {
			return false
		}
	}
	return true
}

// extended executes an instruction whose high two bits are zero.
func (vm *cfiVM) extended(op byte) bool {
	r := &vm.r
	align := vm.cie.dataAlign
	switch op {
	case cfaNop:
	case cfaSetLoc:
		loc := r.encoded(vm.cie.fdeEnc, 0)
		if r.err != nil {
			return false
		}
		if loc > vm.target {
			vm.done = true
		} else {
			vm.loc = loc
		}
	case cfaAdvanceLoc1:
		return vm.advance(uint64(r.u8()))
	case cfaAdvanceLoc2:
		return vm.advance(uint64(r.u16()))
	case cfaAdvanceLoc4:
		return vm.advance(uint64(r.u32()))
	case cfaOffsetExtended, cfaValOffset:
		reg := vm.uleb()
		off := int64(vm.uleb())
		if op == cfaValOffset {
			return vm.setFactored(reg, RuleValOffset, off)
		}
		return vm.setOffset(reg, off)
	case cfaOffsetExtendedSF, cfaValOffsetSF:
		reg := vm.uleb()
		off := vm.sleb()
		if op == cfaValOffsetSF {
			return vm.setFactored(reg, RuleValOffset, off)
		}
		return vm.setOffset(reg, off)
	case cfaGNUNegativeOffsetExtended:
		reg := vm.uleb()
		return vm.setOffset(reg, -int64(vm.uleb()))
	case cfaRestoreExtended:
		return vm.restore(vm.uleb())
	case cfaUndefined:
		return vm.set(vm.uleb(), Rule{Kind: RuleUndefined})
	case cfaSameValue:
		return vm.set(vm.uleb(), Rule{Kind: RuleSame})
	case cfaRegister:
		reg := vm.uleb()
		other := vm.uleb()
		return vm.set(reg, Rule{Kind: RuleRegister, Reg: uint16(min(other, cfaMaxRegister))})
	case cfaRememberState:
		if vm.depth == len(vm.stack) {
			return false
		}
		vm.stack[vm.depth] = vm.cur
		vm.depth++
	case cfaRestoreState:
		if vm.depth == 0 {
			return false
		}
		vm.depth--
		vm.cur = vm.stack[vm.depth]
	case cfaDefCFA:
		reg := vm.uleb()
		return vm.defCFA(reg, int64(vm.uleb()))
	case cfaDefCFASF:
		reg := vm.uleb()
		return vm.defCFA(reg, vm.sleb()*align)
	case cfaDefCFARegister:
		if vm.cur.cfa.Kind != RuleRegOffset {
			return false
		}
		return vm.defCFA(vm.uleb(), vm.cur.cfa.Offset)
	case cfaDefCFAOffset, cfaDefCFAOffsetSF:
		if vm.cur.cfa.Kind != RuleRegOffset {
			return false
		}
		var off int64
		if op == cfaDefCFAOffset {
			off = int64(vm.uleb())
		} else {
			off = vm.sleb() * align
		}
		return vm.defCFA(uint64(vm.cur.cfa.Reg), off)
	case cfaDefCFAExpression:
		vm.cur.cfa = Rule{Kind: RuleCFAExpr, Expr: vm.block()}
	case cfaExpression, cfaValExpression:
		reg := vm.uleb()
		kind := RuleExpr
		if op == cfaValExpression {
			kind = RuleValExpr
		}
		return vm.set(reg, Rule{Kind: kind, Expr: vm.block()})
	case cfaGNUArgsSize:
		vm.uleb()
	default:
		return false
	}
	return true
}

// uleb reads a ULEB128 straight from the data; anything unusual
// (truncated, longer than 64 bits) goes to ehReader.uleb for its error.
func (vm *cfiVM) uleb() uint64 {
	r := &vm.r
	var v uint64
	for i, shift := r.off, uint(0); i < len(r.data) && shift < 63; i, shift = i+1, shift+7 {
		b := r.data[i]
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			r.off = i + 1
			return v
		}
	}
	return r.uleb()
}

// sleb reads an SLEB128 like uleb.
func (vm *cfiVM) sleb() int64 {
	r := &vm.r
	var v int64
	for i, shift := r.off, uint(0); i < len(r.data) && shift < 57; i, shift = i+1, shift+7 {
		b := r.data[i]
		v |= int64(b&0x7f) << shift
		if b < 0x80 {
			r.off = i + 1
			if b&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			return v
		}
	}
	return r.sleb()
}

// block reads a DWARF expression: a ULEB128 length and that many bytes,
// returned as a subslice of the section (capacity cut, so no append can
// reach the bytes after it).
func (vm *cfiVM) block() []byte {
	n := vm.uleb()
	if n > uint64(len(vm.r.data)-vm.r.off) {
		vm.r.fail(vm.r.off, "expression length %#x beyond end of data", n)
		return nil
	}
	start := vm.r.off
	vm.r.off += int(n)
	return vm.r.data[start:vm.r.off:vm.r.off]
}

// advance moves to the next row, delta code alignment units on, unless
// that row starts after the target.
func (vm *cfiVM) advance(delta uint64) bool {
	hi, d := bits.Mul64(delta, vm.cie.codeAlign)
	if hi != 0 {
		return false // overflow
	}
	if next := vm.loc + d; next < vm.loc || next > vm.target {
		vm.done = true
	} else {
		vm.loc = next
	}
	return true
}

// setOffset applies offset(N) with N = factored * data alignment factor.
func (vm *cfiVM) setOffset(reg uint64, factored int64) bool {
	return vm.setFactored(reg, RuleOffset, factored)
}

// setFactored applies a rule of kind with offset factored * data
// alignment factor. A product that overflows leaves the column without a
// rule (RuleUnset, which an unwinder cannot follow for the return
// address) rather than wrapping around to a plausible offset.
func (vm *cfiVM) setFactored(reg uint64, kind RuleKind, factored int64) bool {
	a := vm.cie.dataAlign
	off := factored * a
	if a != 0 && (off/a != factored || (a == -1 && factored == math.MinInt64)) {
		return vm.set(reg, Rule{})
	}
	return vm.set(reg, Rule{Kind: kind, Offset: off})
}

// set gives reg rule r in the current row; only the columns UnwindRow
// returns are kept.
func (vm *cfiVM) set(reg uint64, r Rule) bool {
	switch reg {
	case vm.cie.raReg:
		vm.cur.ra = r
	case dwarfRBP:
		vm.cur.rbp = r
	}
	return reg <= cfaMaxRegister
}

// restore gives reg its rule after the CIE's initial instructions.
func (vm *cfiVM) restore(reg uint64) bool {
	switch reg {
	case vm.cie.raReg:
		vm.cur.ra = vm.init.ra
	case dwarfRBP:
		vm.cur.rbp = vm.init.rbp
	}
	return reg <= cfaMaxRegister
}

func (vm *cfiVM) defCFA(reg uint64, off int64) bool {
	if reg > cfaMaxRegister {
		return false
	}
	vm.cur.cfa = Rule{Kind: RuleRegOffset, Reg: uint16(reg), Offset: off}
	return true
}

package symbolize

import (
	"debug/elf"
	"encoding/binary"
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
	r    ehReader  // over the whole .eh_frame; copied for each evaluation
	fdes []fdeInfo // sorted by lo
}

// newCFATable indexes the FDEs of an .eh_frame section. It returns nil
// when the section has no FDE; FDEs decoded before an error are kept.
func newCFATable(data []byte, order binary.ByteOrder, ptrSize int, bases ehBases) *cfaTable {
	var fdes []fdeInfo
	walkEHFrame(data, order, ptrSize, bases, func(fi fdeInfo) {
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
	return &cfaTable{
		r:    ehReader{name: ".eh_frame", data: data, order: order, ptrSize: ptrSize, bases: bases},
		fdes: fdes,
	}
}

// CFA returns the CFA rule in effect at fileOffset (the same kind of file
// offset Resolve takes: ip - mapping start + pgoff), evaluating the FDE's
// CFI program (with its CIE's initial instructions) up to that address,
// so that a frame-pointer unwinder can find the return address of a
// function that has no frame at that instruction. ok is false when no
// FDE covers the address, when the rule is an expression
// (DW_CFA_def_cfa_expression), on malformed CFI, for files other than
// x86-64, and unless the return address is saved at CFA-8 (return address
// column 16, rule offset(-8)) there: that is what a caller of CFA relies
// on, and it does not hold in signal trampolines or in the outermost
// frame (_start marks its return address undefined).
//
// CFA reads no file and takes no lock once the unwind table is loaded by
// the first call; it costs a binary search and a run of one short CFI
// program.
func (f *File) CFA(fileOffset uint64) (rule CFARule, ok bool) {
	pc, ok := f.vaddr(fileOffset)
	if !ok {
		return CFARule{}, false
	}
	f.cfaOnce.Do(f.loadCFA)
	if f.cfa == nil {
		return CFARule{}, false
	}
	return f.cfa.lookup(pc)
}

// loadCFA builds f.cfa, left nil when the file cannot be used.
func (f *File) loadCFA() {
	if f.elf.Machine != elf.EM_X86_64 || f.elf.Class != elf.ELFCLASS64 {
		return
	}
	sec, err := ehFrameSection(f.elf)
	if err != nil || sec.data == nil {
		return
	}
	f.cfa = newCFATable(sec.data, f.elf.ByteOrder, sec.ptrSize, sec.bases)
}

// lookup returns the CFA rule at vaddr pc.
func (t *cfaTable) lookup(pc uint64) (CFARule, bool) {
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
		return CFARule{}, false
	}
	return t.eval(&t.fdes[lo-1], pc)
}

// cfiState is the part of a CFI row that CFA needs.
type cfiState struct {
	cfaReg  uint64
	cfaOff  int64
	cfaKind uint8
	raAt8   bool // the return address rule is offset(-8)
}

// cfiState.cfaKind values.
const (
	cfaUnset uint8 = iota
	cfaRegOff
	cfaExpr
)

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

// eval runs fde's CIE initial instructions, then its own program up to pc.
func (t *cfaTable) eval(fde *fdeInfo, pc uint64) (CFARule, bool) {
	cie := fde.cie
	if cie.raReg != dwarfRA {
		return CFARule{}, false
	}
	vm := cfiVM{data: t.r.data, r: t.r, cie: cie, loc: fde.lo, target: pc}
	if !vm.run(cie.insn, cie.end) {
		return CFARule{}, false
	}
	vm.init = vm.cur
	if !vm.done && !vm.run(fde.insn, fde.end) {
		return CFARule{}, false
	}
	s := vm.cur
	if s.cfaKind != cfaRegOff || !s.raAt8 {
		return CFARule{}, false
	}
	return CFARule{Register: int(s.cfaReg), Offset: s.cfaOff}, true
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
			return vm.setOther(reg)
		}
		return vm.setOffset(reg, off)
	case cfaOffsetExtendedSF, cfaValOffsetSF:
		reg := vm.uleb()
		off := vm.sleb()
		if op == cfaValOffsetSF {
			return vm.setOther(reg)
		}
		return vm.setOffset(reg, off)
	case cfaGNUNegativeOffsetExtended:
		reg := vm.uleb()
		return vm.setOffset(reg, -int64(vm.uleb()))
	case cfaRestoreExtended:
		return vm.restore(vm.uleb())
	case cfaUndefined, cfaSameValue:
		return vm.setOther(vm.uleb())
	case cfaRegister:
		reg := vm.uleb()
		vm.uleb()
		return vm.setOther(reg)
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
		if vm.cur.cfaKind != cfaRegOff {
			return false
		}
		return vm.defCFA(vm.uleb(), vm.cur.cfaOff)
	case cfaDefCFAOffset, cfaDefCFAOffsetSF:
		if vm.cur.cfaKind != cfaRegOff {
			return false
		}
		var off int64
		if op == cfaDefCFAOffset {
			off = int64(vm.uleb())
		} else {
			off = vm.sleb() * align
		}
		return vm.defCFA(vm.cur.cfaReg, off)
	case cfaDefCFAExpression:
		vm.block()
		vm.cur.cfaKind = cfaExpr
	case cfaExpression, cfaValExpression:
		reg := vm.uleb()
		vm.block()
		return vm.setOther(reg)
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

// block skips a DWARF expression: a ULEB128 length and that many bytes.
func (vm *cfiVM) block() {
	n := vm.uleb()
	if n > uint64(len(vm.r.data)-vm.r.off) {
		vm.r.fail(vm.r.off, "expression length %#x beyond end of data", n)
		return
	}
	vm.r.off += int(n)
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
	if reg == vm.cie.raReg {
		// Exact, without the wrap-around of the product.
		a := vm.cie.dataAlign
		vm.cur.raAt8 = a != 0 && -8%a == 0 && factored == -8/a
	}
	return reg <= cfaMaxRegister
}

// setOther applies any rule other than offset(N) to reg.
func (vm *cfiVM) setOther(reg uint64) bool {
	if reg == vm.cie.raReg {
		vm.cur.raAt8 = false
	}
	return reg <= cfaMaxRegister
}

// restore gives reg its rule after the CIE's initial instructions.
func (vm *cfiVM) restore(reg uint64) bool {
	if reg == vm.cie.raReg {
		vm.cur.raAt8 = vm.init.raAt8
	}
	return reg <= cfaMaxRegister
}

func (vm *cfiVM) defCFA(reg uint64, off int64) bool {
	if reg > cfaMaxRegister {
		return false
	}
	vm.cur.cfaKind, vm.cur.cfaReg, vm.cur.cfaOff = cfaRegOff, reg, off
	return true
}

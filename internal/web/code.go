package web

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/arch/x86/x86asm"

	"trueprof/internal/symbolize"
)

// FuncCode is what a module's debug information says about the source
// lines of a probed function (the source view's coverage marks):
type FuncCode struct {
	// Lines are the lines of the function's file that have its code
	// (the DWARF line table over its symbol's range): a function never
	// called executed none of them. Lines without code (comments, blank
	// lines, declarations) are not in it.
	Lines []int `json:"lines"`
	// Entry are the lines of its entry basic block, from the entry
	// address to the first jump or return: every call executes them.
	Entry []int `json:"entry"`
}

// maxCodeBytes bounds the machine code read for one entry block.
const maxCodeBytes = 1 << 20

// code fills Funcs.Decl for every function whose machine code is in a
// module the trace names by absolute path, and Data.Code for probed
// ones, from the modules' symbols and DWARF. The module must still be
// the one recorded: its symbol at the function's location must carry
// the function's name.
func (b *builder) code() {
	d := b.d
	byModule := map[string][]int{}
	for fn, loc := range b.phys {
		module := b.p.Locations[loc].Module
		if d.Funcs.File[fn] >= 0 && filepath.IsAbs(module) && safePath(module) {
			byModule[module] = append(byModule[module], fn)
		}
	}
	for module, fns := range byModule {
		if st, err := os.Stat(module); err != nil || !st.Mode().IsRegular() {
			continue
		}
		sf, err := symbolize.OpenFile(module)
		if err != nil {
			continue
		}
		slices.Sort(fns)
		offsets := make([]uint64, len(fns))
		for k, fn := range fns {
			offsets[k] = b.p.Locations[b.phys[fn]].Offset
		}
		fcs := sf.FunctionCodes(offsets)
		for k, fn := range fns {
			fc := &fcs[k]
			if fc.Name == "" || fc.Name != d.Funcs.Name[fn] {
				continue
			}
			file := d.Files[d.Funcs.File[fn]]
			switch {
			case fc.DeclLine > 0 && fc.DeclFile == file:
				d.Funcs.Decl[fn] = fc.DeclLine
			case fc.DeclLine == 0:
				for _, r := range fc.Rows {
					if r.Lo <= fc.Entry && fc.Entry < r.Hi && r.File == file {
						d.Funcs.Decl[fn] = r.Line
					}
				}
			}
			if !d.Funcs.Probed[fn] || len(fc.Rows) == 0 {
				continue
			}
			if d.Code == nil {
				d.Code = map[int]*FuncCode{}
			}
			d.Code[fn] = funcCode(sf, fc, file)
		}
		sf.Close()
	}
}

// funcCode lists the lines of file with fc's code, and those of its
// entry basic block (x86-64 only; none elsewhere).
func funcCode(sf *symbolize.File, fc *symbolize.FunctionCode, file string) *FuncCode {
	out := &FuncCode{Lines: []int{}, Entry: []int{}}
	for _, r := range fc.Rows {
		if r.File == file {
			out.Lines = append(out.Lines, r.Line)
		}
	}
	end := entryBlockEnd(sf, fc)
	for _, r := range fc.Rows {
		if r.File == file && r.Lo < end && r.Hi > fc.Entry {
			out.Entry = append(out.Entry, r.Line)
		}
	}
	slices.Sort(out.Lines)
	slices.Sort(out.Entry)
	out.Lines = slices.Compact(out.Lines)
	out.Entry = slices.Compact(out.Entry)
	return out
}

// entryBlockEnd returns the address after the last instruction of the
// basic block at fc.Entry: the first jump, conditional jump, return or
// trap ends it (that instruction is executed too). Calls do not: the
// function returned (a probed call has its exit). It returns fc.Entry
// when the code cannot be read.
func entryBlockEnd(sf *symbolize.File, fc *symbolize.FunctionCode) uint64 {
	if sf.Machine() != elf.EM_X86_64 || fc.Hi <= fc.Entry || fc.Hi-fc.Entry > maxCodeBytes {
		return fc.Entry
	}
	code, err := sf.Code(fc.Entry, fc.Hi-fc.Entry)
	if err != nil {
		return fc.Entry
	}
	pc := 0
	for pc < len(code) {
		inst, err := x86asm.Decode(code[pc:], 64)
		if err != nil || inst.Len == 0 {
			break
		}
		pc += inst.Len
		if endsBlock(inst.Op) {
			break
		}
	}
	return fc.Entry + uint64(pc)
}

// endsBlock tells the instructions after which execution may not go on
// to the next one.
func endsBlock(op x86asm.Op) bool {
	switch op {
	case x86asm.JMP, x86asm.RET, x86asm.LRET, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ,
		x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE, x86asm.JECXZ, x86asm.JG,
		x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JRCXZ, x86asm.JS, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE,
		x86asm.UD1, x86asm.UD2, x86asm.HLT, x86asm.INT, x86asm.SYSCALL, x86asm.SYSENTER:
		return true
	}
	return false
}

package symbolize

import (
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"

	"golang.org/x/arch/x86/x86asm"
)

// Function is a function symbol of a File: the code at ELF virtual
// addresses [Addr, Addr+Size).
type Function struct {
	Name   string // demangled
	Addr   uint64
	Size   uint64
	Global bool // not STB_LOCAL
}

// ErrNoCode means an address is in no executable segment of the file.
var ErrNoCode = errors.New("address in no executable segment")

// maxCode bounds the machine code Code reads at once: a size comes from
// the file, and the file is not trusted to size an allocation.
const maxCode = 1 << 24

// Functions returns the file's functions sorted by address, the preferred
// name of an address first (the one Resolve gives), with every alias: the
// STT_FUNC symbols of .symtab (or of the separate debug file), else of
// .dynsym, else a Go binary's .gopclntab (which stripping keeps). A
// symbol without a size (hand-written assembly) extends to the next
// function; the last one keeps size 0. The result is empty for a
// stripped file and must not be modified.
func (f *File) Functions() []Function {
	f.symbolTables()
	return f.functions
}

// symbolTables reads the function symbols and imports once.
func (f *File) symbolTables() {
	f.tablesOnce.Do(func() {
		dyn, _ := f.elf.DynamicSymbols()
		f.imports = map[string]bool{}
		for _, d := range dyn {
			switch {
			case d.Section != elf.SHN_UNDEF:
				f.exports = append(f.exports, d)
			case d.Name != "":
				f.imports[d.Name] = true
			}
		}
		symtab := collectSymbols(f.symFile, f.symFile.Symbols)
		dynsym := collectSymbols(f.elf, func() ([]elf.Symbol, error) { return dyn, nil })
		f.functions = functionSymbols(symtab, dynsym)
		if len(f.functions) == 0 && f.symFile.Section(".symtab") == nil {
			// A Go binary built with -ldflags=-s keeps .gopclntab.
			if tab := goTable(f.elf); tab != nil {
				f.functions = goFunctions(tab)
			}
		}
	})
}

// FunctionAt returns the innermost function whose code holds vaddr, the
// preferred name of its address.
func (f *File) FunctionAt(vaddr uint64) (Function, bool) {
	fns := f.Functions()
	// Functions starting at or before vaddr, nearest first.
	i := sort.Search(len(fns), func(i int) bool { return fns[i].Addr > vaddr })
	for j := i - 1; j >= 0; j-- {
		fn := fns[j]
		if vaddr-fn.Addr < fn.Size {
			// The first alias of that address is the preferred one.
			for j > 0 && fns[j-1].Addr == fn.Addr {
				j--
			}
			return fns[j], true
		}
		if fn.Addr+maxCode < vaddr {
			break // no function is that long
		}
	}
	return Function{}, false
}

// functionStarting returns the preferred function that starts at vaddr.
func (f *File) functionStarting(vaddr uint64) (Function, bool) {
	fns := f.Functions()
	i := sort.Search(len(fns), func(i int) bool { return fns[i].Addr >= vaddr })
	if i < len(fns) && fns[i].Addr == vaddr {
		return fns[i], true
	}
	return Function{}, false
}

// Machine returns the file's ELF machine (elf.EM_X86_64 for x86-64 code).
func (f *File) Machine() elf.Machine { return f.elf.Machine }

// Dynamic reports whether the file names a program interpreter
// (PT_INTERP): an executable the dynamic loader starts, whose undefined
// dynamic symbols a preloaded library can interpose.
func (f *File) Dynamic() bool { return f.interp != "" }

// Interpreter returns the program interpreter the file names
// (PT_INTERP: the dynamic linker, /lib64/ld-linux-x86-64.so.2), "" for a
// file without PT_INTERP (a static executable, most shared libraries;
// glibc's libc.so.6 has one).
func (f *File) Interpreter() string { return f.interp }

// Sonames returns the file's DT_SONAME entries (a shared library's
// names for the dynamic loader), none for a file without them.
func (f *File) Sonames() []string {
	names, _ := f.elf.DynString(elf.DT_SONAME)
	return names
}

// Imports reports whether the file's dynamic symbol table has name
// undefined: the file uses it from another module.
func (f *File) Imports(name string) bool {
	f.symbolTables()
	return f.imports[name]
}

// HasDynamicSymbol reports whether the file's dynamic symbol table
// defines or imports a symbol whose name (as the table has it: mangled)
// match accepts.
func (f *File) HasDynamicSymbol(match func(name string) bool) bool {
	f.symbolTables()
	for name := range f.imports {
		if match(name) {
			return true
		}
	}
	return slices.ContainsFunc(f.exports, func(s elf.Symbol) bool { return match(s.Name) })
}

// Exports reports whether the file's dynamic symbol table defines name:
// other modules can use it.
func (f *File) Exports(name string) bool {
	f.symbolTables()
	return slices.ContainsFunc(f.exports, func(s elf.Symbol) bool { return s.Name == name })
}

// Needed returns the file's DT_NEEDED entries: the shared libraries the
// dynamic loader loads for it.
func (f *File) Needed() []string {
	libs, _ := f.elf.ImportedLibraries()
	return libs
}

// AddressWords calls yield with each value in which the file's data may
// hold a function's address: every aligned 8-byte word of its allocated
// sections that are neither code nor zero-filled, every relocation's
// addend and the value of every symbol it exports. It reports false if
// a section cannot be read, when the values are not all there.
func (f *File) AddressWords(yield func(uint64)) bool {
	for _, s := range f.elf.Sections {
		switch {
		case s.Type == elf.SHT_RELA:
			b, err := s.Data()
			if err != nil {
				return false
			}
			for i := 0; i+24 <= len(b); i += 24 {
				yield(binary.LittleEndian.Uint64(b[i+16:]))
			}
		case s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR == 0 && s.Type != elf.SHT_NOBITS:
			b, err := s.Data()
			if err != nil {
				return false
			}
			for i := int((8 - s.Addr%8) % 8); i+8 <= len(b); i += 8 {
				yield(binary.LittleEndian.Uint64(b[i:]))
			}
		}
	}
	f.symbolTables()
	for _, d := range f.exports {
		yield(d.Value)
	}
	return true
}

// execSegment returns the executable PT_LOAD segment holding vaddr.
func (f *File) execSegment(vaddr uint64) *elf.Prog {
	for _, p := range f.elf.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && vaddr >= p.Vaddr && vaddr-p.Vaddr < p.Filesz {
			return p
		}
	}
	return nil
}

// FileOffset converts an ELF virtual address in an executable segment to
// its file offset, which is what uprobes and the mappings' page offsets
// count in. It reports false for an address outside executable code.
func (f *File) FileOffset(vaddr uint64) (uint64, bool) {
	p := f.execSegment(vaddr)
	if p == nil {
		return 0, false
	}
	return vaddr - p.Vaddr + p.Off, true
}

// Code reads the machine code at ELF virtual addresses [vaddr,
// vaddr+size), cut at the end of the executable segment holding vaddr. It
// returns an error wrapping ErrNoCode if vaddr is in no executable
// segment, and refuses more than 16 MiB.
func (f *File) Code(vaddr, size uint64) ([]byte, error) {
	p := f.execSegment(vaddr)
	if p == nil {
		return nil, fmt.Errorf("%s: %#x: %w", f.path, vaddr, ErrNoCode)
	}
	size = min(size, p.Vaddr+p.Filesz-vaddr)
	if size > maxCode {
		return nil, fmt.Errorf("%s: %d bytes of code at %#x: more than %d", f.path, size, vaddr, maxCode)
	}
	code := make([]byte, size)
	if _, err := p.ReadAt(code, int64(vaddr-p.Vaddr)); err != nil {
		return nil, fmt.Errorf("%s: reading code at %#x: %w", f.path, vaddr, err)
	}
	return code, nil
}

// Callees returns the functions of this file that the function starting
// at vaddr calls directly (x86-64 CALL rel32, and JMPs to a function's
// start: tail calls), each once, in the order of their first call, its
// cold parts' calls included (ColdParts): a part is the function's own
// code, never a callee. Calls through the PLT or a register are not
// followed: their targets are in other modules or unknown until run. It
// returns nil for an address where no function starts, or for code
// other than x86-64.
func (f *File) Callees(vaddr uint64) []Function {
	fn, ok := f.functionStarting(vaddr)
	if !ok || f.Machine() != elf.EM_X86_64 {
		return nil
	}
	var out []Function
	for _, part := range append([]Function{fn}, f.ColdParts(fn.Addr)...) {
		code, err := f.Code(part.Addr, part.Size)
		if err != nil {
			continue
		}
		for op, target := range directBranches(code, part.Addr) {
			if op != x86asm.CALL && op != x86asm.JMP {
				continue
			}
			callee, ok := f.functionStarting(target)
			if !ok || callee.Addr == fn.Addr || slices.ContainsFunc(out, func(c Function) bool { return c.Addr == callee.Addr }) {
				continue
			}
			if _, cold := f.ColdParent(callee.Addr); cold {
				continue // this function's part, or (rarely) another's
			}
			out = append(out, callee)
		}
	}
	return out
}

// directBranches yields the operation and target of each branch and call
// with a relative target (rel8, rel32) of x86-64 code loaded at addr. A
// byte that does not decode is skipped.
func directBranches(code []byte, addr uint64) iter.Seq2[x86asm.Op, uint64] {
	return func(yield func(x86asm.Op, uint64) bool) {
		for off := 0; off < len(code); {
			inst, err := x86asm.Decode(code[off:], 64)
			if err != nil {
				off++
				continue
			}
			off += inst.Len
			if rel, ok := inst.Args[0].(x86asm.Rel); ok && !yield(inst.Op, addr+uint64(off)+uint64(int64(rel))) {
				return
			}
		}
	}
}

// functionSymbols lists the STT_FUNC symbols of symtab or, if it has
// none, of dynsym, as Functions describes them. Aliases are in
// symbolOrder, as chooseSymbols ranks them, so the preferred one is the
// name Resolve gives.
func functionSymbols(symtab, dynsym []symbol) []Function {
	syms := funcSymbols(symtab)
	if len(syms) == 0 {
		syms = funcSymbols(dynsym)
	}
	slices.SortFunc(syms, symbolOrder)
	funcs := make([]Function, len(syms))
	for i, s := range syms {
		funcs[i] = Function{Name: Demangle(s.name), Addr: s.lo, Size: s.size, Global: s.bind != elf.STB_LOCAL}
	}
	// A symbol without a size extends to the next function.
	for i := range funcs {
		if funcs[i].Size == 0 {
			for j := i + 1; j < len(funcs); j++ {
				if funcs[j].Addr > funcs[i].Addr {
					funcs[i].Size = funcs[j].Addr - funcs[i].Addr
					break
				}
			}
		}
	}
	return funcs
}

// funcSymbols returns the STT_FUNC symbols of syms.
func funcSymbols(syms []symbol) []symbol {
	var out []symbol
	for _, s := range syms {
		if s.typ == elf.STT_FUNC {
			out = append(out, s)
		}
	}
	return out
}

// goFunctions lists the functions of a Go binary's .gopclntab.
func goFunctions(tab *gosym.Table) []Function {
	var funcs []Function
	for _, fn := range tab.Funcs {
		if fn.End > fn.Entry {
			funcs = append(funcs, Function{Name: fn.Name, Addr: fn.Entry, Size: fn.End - fn.Entry, Global: true})
		}
	}
	return funcs
}

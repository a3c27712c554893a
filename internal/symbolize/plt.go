package symbolize

import (
	"bytes"
	"cmp"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
)

// PLT stubs have no symbols of their own: a call to a function of another
// module (or to an exported function of the same shared library) goes
// through a stub that jumps through the function's GOT slot, and samples
// in the stubs would be nameless. Like perf ("memcpy@plt") and objdump
// ("<memcpy@plt>"), trueprof names each stub after the dynamic symbol of
// the relocation that fills its slot.
//
// The slot is read from the stub's own code rather than assumed from the
// relocation order, as binutils does: on x86-64 every stub that has a
// slot starts with "jmp *disp32(%rip)", after an endbr64 (IBT) and a bnd
// prefix (MPX) when the linker put them there. That one rule covers the
// classic lazy .plt (16-byte header, then 16-byte entries), .plt.sec
// (the IBT layout, where .plt keeps only the lazy-binding entries, which
// jump to the header instead), .plt.got (8 or 16 bytes, slots filled by
// GLOB_DAT relocations in .rela.dyn) and the old .plt.bnd, and it does
// not depend on linkers keeping IRELATIVE relocations in stub order.

// pltStub is one PLT entry.
type pltStub struct {
	lo, hi uint64
	// header is set for the lazy-binding code at the start of .plt
	// ("pushq GOT+8(%rip)"), which perf names ".plt".
	header bool
	// target is the name of the dynamic symbol whose GOT slot the stub
	// jumps through; "" for an IRELATIVE slot or the header.
	target string
	// ifunc is, for an IRELATIVE slot (a local IFUNC, as in libc), the
	// address of the resolver function: the relocation's addend.
	ifunc uint64
}

// pltSections are the sections that hold PLT stubs.
var pltSections = []string{".plt", ".plt.sec", ".plt.got", ".plt.bnd"}

// maxPLTSection bounds the size of a PLT or relocation section read: the
// size comes from an untrusted file, and libstdc++'s largest is 100 KB.
const maxPLTSection = 64 << 20

// x86-64 relocation types that fill a GOT slot a stub jumps through.
const (
	rX8664GlobDat   = 6  // R_X86_64_GLOB_DAT: .plt.got slots
	rX8664JumpSlot  = 7  // R_X86_64_JUMP_SLOT: .plt and .plt.sec slots
	rX8664IRelative = 37 // R_X86_64_IRELATIVE: slots of local IFUNCs
)

// gotSlot is what fills one GOT slot: a dynamic symbol, or an IFUNC
// resolver's address.
type gotSlot struct {
	target string
	ifunc  uint64
}

// pltStubs returns the PLT stubs of ef, sorted by address, or nil when ef
// is not x86-64 or has no PLT. Stubs whose slot no relocation names (the
// lazy-binding entries of an IBT .plt) are left out. The error reports a
// malformed section; the stubs found before it are still returned.
func pltStubs(ef *elf.File) ([]pltStub, error) {
	if ef.Machine != elf.EM_X86_64 || ef.Class != elf.ELFCLASS64 {
		return nil, nil
	}
	var secs []*elf.Section
	for _, name := range pltSections {
		if s := ef.Section(name); s != nil && s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_EXECINSTR != 0 {
			secs = append(secs, s)
		}
	}
	if len(secs) == 0 {
		return nil, nil
	}
	slots, err := gotSlots(ef)
	var stubs []pltStub
	for _, s := range secs {
		code, rerr := pltSectionData(s)
		if rerr != nil {
			err = rerr
			continue
		}
		size := s.Entsize
		if size != 8 && size != 16 || uint64(len(code))%size != 0 {
			size = 16 // x86-64's PLT entry size, whatever the header says
		}
		for off := uint64(0); off+size <= uint64(len(code)); off += size {
			entry := code[off : off+size]
			stub := pltStub{lo: s.Addr + off, hi: s.Addr + off + size}
			if off == 0 && s.Name == ".plt" && bytes.HasPrefix(entry, pushGOT) {
				stub.header = true
				stubs = append(stubs, stub)
				continue
			}
			slot, ok := pltJumpSlot(entry, stub.lo)
			if !ok {
				continue
			}
			g, ok := slots[slot]
			if !ok {
				continue
			}
			stub.target, stub.ifunc = g.target, g.ifunc
			stubs = append(stubs, stub)
		}
	}
	slices.SortFunc(stubs, func(a, b pltStub) int { return cmp.Compare(a.lo, b.lo) })
	return stubs, err
}

// pltSectionData reads a PLT or relocation section, refusing one larger
// than maxPLTSection.
func pltSectionData(s *elf.Section) ([]byte, error) {
	if s.Size > maxPLTSection {
		return nil, &DecodeError{Name: s.Name, Err: fmt.Errorf("%w: %d bytes, more than a PLT needs", ErrFormat, s.Size)}
	}
	data, err := s.Data()
	if err != nil {
		return nil, &DecodeError{Name: s.Name, Err: err}
	}
	return data, nil
}

var (
	// endbr64 starts every indirect-branch target under IBT.
	endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	// pushGOT is "pushq disp32(%rip)", the first instruction of the lazy
	// PLT header (it pushes GOT[1], the link map).
	pushGOT = []byte{0xff, 0x35}
)

// pltJumpSlot decodes the "jmp *disp32(%rip)" that starts a PLT entry at
// address addr, after an optional endbr64 and bnd prefix, and returns the
// address of the GOT slot it jumps through.
func pltJumpSlot(entry []byte, addr uint64) (uint64, bool) {
	n := 0
	if bytes.HasPrefix(entry, endbr64) {
		n += len(endbr64)
	}
	if n < len(entry) && entry[n] == 0xf2 { // bnd
		n++
	}
	const insnLen = 6 // ff 25 disp32
	if n+insnLen > len(entry) || entry[n] != 0xff || entry[n+1] != 0x25 {
		return 0, false
	}
	disp := int32(binary.LittleEndian.Uint32(entry[n+2:]))
	// RIP-relative: from the end of the instruction.
	return addr + uint64(n+insnLen) + uint64(int64(disp)), true
}

// gotSlots maps the address of each GOT slot that a dynamic relocation
// (.rela.plt, .rela.dyn) fills with a function's address to what fills it.
func gotSlots(ef *elf.File) (map[uint64]gotSlot, error) {
	// DynamicSymbols leaves out symbol 0, so symbol i is syms[i-1].
	syms, _ := ef.DynamicSymbols()
	slots := make(map[uint64]gotSlot)
	var err error
	for _, s := range ef.Sections {
		// Dynamic relocations are loaded; a static executable's
		// IRELATIVE ones are against no symbol table.
		if s.Type != elf.SHT_RELA || s.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		named := s.Link != 0 && int(s.Link) < len(ef.Sections) && ef.Sections[s.Link].Type == elf.SHT_DYNSYM
		data, rerr := pltSectionData(s)
		if rerr != nil {
			err = rerr
			continue
		}
		const relaSize = 24 // Elf64_Rela: r_offset, r_info, r_addend
		if len(data)%relaSize != 0 {
			err = &DecodeError{Name: s.Name, Offset: int64(len(data) / relaSize * relaSize),
				Err: fmt.Errorf("%w: size %d is not a multiple of %d", ErrFormat, len(data), relaSize)}
		}
		for off := 0; off+relaSize <= len(data); off += relaSize {
			where := ef.ByteOrder.Uint64(data[off:])
			info := ef.ByteOrder.Uint64(data[off+8:])
			addend := ef.ByteOrder.Uint64(data[off+16:])
			sym := info >> 32
			switch uint32(info) {
			case rX8664JumpSlot, rX8664GlobDat:
				if !named || sym == 0 || sym > uint64(len(syms)) || syms[sym-1].Name == "" {
					continue
				}
				slots[where] = gotSlot{target: syms[sym-1].Name}
			case rX8664IRelative:
				slots[where] = gotSlot{ifunc: addend}
			}
		}
	}
	return slots, err
}

// pltName names a stub as perf does: "NAME@plt" after the symbol it jumps
// to (demangled), ".plt" for the lazy-binding header. An IRELATIVE slot is
// named after the symbol at its resolver's address among syms (sorted by
// address, as chooseSymbols returns them), else "*ABS*+0xADDR@plt" after
// the resolver's address, as objdump does.
func pltName(p pltStub, syms []symbol) string {
	switch {
	case p.header:
		return ".plt"
	case p.target != "":
		return Demangle(p.target) + "@plt"
	}
	if i, ok := slices.BinarySearchFunc(syms, p.ifunc, func(s symbol, addr uint64) int { return cmp.Compare(s.lo, addr) }); ok {
		return Demangle(syms[i].name) + "@plt"
	}
	return fmt.Sprintf("*ABS*+%#x@plt", p.ifunc)
}

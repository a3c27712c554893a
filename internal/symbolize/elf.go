package symbolize

import (
	"bytes"
	"cmp"
	"debug/elf"
	"debug/gosym"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// DefaultDebugDir is where separate debug files are looked up by build id
// (DIR/.build-id/xx/yyyy.debug) and by debug link (DIR/PATH-DIR/NAME).
const DefaultDebugDir = "/usr/lib/debug"

// Options tune OpenFileOptions. The zero value is what OpenFile uses.
type Options struct {
	// DebugDir is searched for separate debug information when the file
	// lacks a symbol table or DWARF. Empty means DefaultDebugDir.
	DebugDir string
	// NoDebugFile disables the search for separate debug information.
	NoDebugFile bool
}

// File is a loaded ELF module (an executable or a shared library) that
// resolves file offsets to functions and source positions. Its methods are
// safe for concurrent use.
type File struct {
	path     string
	base     string // base name, used to name addresses without a function
	buildID  []byte
	elf      *elf.File
	debug    *elf.File // separate debug file, or nil
	debugPth string
	loads    []elf.ProgHeader

	namesOnce sync.Once   // nameTable
	funcs     []funcEntry // indexed by span id
	spans     []span      // sorted, disjoint function ranges

	gotab *gosym.Table // from .gopclntab when it is the best line source
	// symFile is the file whose .symtab names functions (f.elf or the
	// debug file); functions are read from it (and f.elf's .dynsym),
	// imports and exports from f.elf's .dynsym, at the first need
	// (symbolTables): resolving never does.
	symFile    *elf.File
	tablesOnce sync.Once
	functions  []Function
	imports    map[string]bool // undefined .dynsym names
	exports    []elf.Symbol    // defined .dynsym symbols
	interp     string          // the file's PT_INTERP, "" without one
	isGo       bool            // the file has Go code (.gopclntab or .go.buildinfo)

	mu        sync.Mutex
	dwarfDone bool
	dw        *dwarfInfo // nil if the file has no usable DWARF
	dwarfErr  error
	cache     map[uint64][]Frame

	cfaOnce sync.Once
	cfa     *cfaTable // nil if the file has no usable .eh_frame

	cold coldParts // the functions' cold parts (ColdParent)
}

// IsGo reports whether the file holds Go code. Go keeps frame pointers
// and has no .eh_frame for its own code (its .debug_frame does not
// describe its stack switches), so unwinders follow frame pointers in it.
func (f *File) IsGo() bool { return f.isGo }

// funcKind orders the sources of function ranges: a lower kind wins where
// ranges overlap.
type funcKind uint8

const (
	kindSymbol funcKind = iota // .symtab, .dynsym or .gopclntab
	kindFDE                    // an .eh_frame FDE without a symbol
)

type funcEntry struct {
	name  string // demangled; "" for an FDE, named on demand
	kind  funcKind
	start uint64 // where the function starts, which names an FDE
}

// maxCache bounds the per-address result cache; it is cleared when full.
// A recording touches far fewer distinct addresses in practice.
const maxCache = 1 << 16

// OpenFile opens the ELF file at path with default Options.
func OpenFile(path string) (*File, error) {
	return OpenFileOptions(path, Options{})
}

// OpenFileOptions opens the ELF file at path and loads its function table:
// symbols from .symtab and .dynsym (or a separate debug file, or a Go
// .gopclntab), PLT stubs named "NAME@plt", plus .eh_frame FDE ranges for
// code without symbols. DWARF is
// loaded lazily by the first Resolve that needs it. Malformed unwind
// tables are not fatal: the file still resolves through its symbols.
func OpenFileOptions(path string, opts Options) (*File, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	f := &File{
		path:  path,
		base:  filepath.Base(path),
		elf:   ef,
		cache: make(map[uint64][]Frame),
	}
	if err := f.load(opts); err != nil {
		f.Close()
		return nil, fmt.Errorf("symbolize: %s: %w", path, err)
	}
	return f, nil
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// DebugPath returns the path of the separate debug file in use, or "".
func (f *File) DebugPath() string { return f.debugPth }

// BuildID returns the GNU build id note of the file, or nil if it has none.
// The caller must not modify the result.
func (f *File) BuildID() []byte { return f.buildID }

// Close releases the file and its debug file. Resolve must not be called
// after Close.
func (f *File) Close() error {
	var err error
	if f.debug != nil {
		err = f.debug.Close()
	}
	if e := f.elf.Close(); err == nil {
		err = e
	}
	return err
}

func (f *File) load(opts Options) error {
	ef := f.elf
	for _, p := range ef.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			f.loads = append(f.loads, p.ProgHeader)
		case elf.PT_INTERP:
			b := make([]byte, min(p.Filesz, 4096))
			n, _ := p.ReadAt(b, 0)
			name, _, _ := bytes.Cut(b[:n], []byte{0})
			f.interp = string(name)
		}
	}
	f.buildID = buildID(ef)

	hasSymtab := ef.Section(".symtab") != nil
	if !opts.NoDebugFile && (!hasSymtab || !hasDWARF(ef)) {
		dir := opts.DebugDir
		if dir == "" {
			dir = DefaultDebugDir
		}
		f.debug, f.debugPth = findDebugFile(f.path, dir, ef, f.buildID)
	}

	f.isGo = ef.Section(".gopclntab") != nil || ef.Section(".go.buildinfo") != nil
	f.symFile = ef
	if !hasSymtab && f.debug != nil && f.debug.Section(".symtab") != nil {
		f.symFile = f.debug
	}
	return nil
}

// nameTable builds the table of function ranges that names addresses,
// once, at the first Resolve or FunctionCodes: a File opened only for its
// machine code (a probe planner) does not pay for it.
func (f *File) nameTable() {
	f.namesOnce.Do(f.buildNames)
}

func (f *File) buildNames() {
	ef, symFile := f.elf, f.symFile
	var raw []span
	var entries []funcEntry
	add := func(lo, hi uint64, name string, kind funcKind) {
		raw = append(raw, span{lo: lo, hi: hi, id: int32(len(entries))})
		entries = append(entries, funcEntry{name: name, kind: kind, start: lo})
	}

	syms := collectSymbols(symFile, symFile.Symbols)
	syms = append(syms, collectSymbols(ef, ef.DynamicSymbols)...)
	syms = chooseSymbols(syms)
	for _, s := range syms {
		add(s.lo, s.hi, Demangle(s.name), kindSymbol)
	}
	// PLT stubs are named from the file itself: a debug file's .plt is
	// NOBITS. A malformed PLT only leaves stubs unnamed.
	stubs, _ := pltStubs(ef)
	for _, p := range stubs {
		add(p.lo, p.hi, pltName(p, syms), kindSymbol)
	}

	if symFile.Section(".symtab") == nil || !hasDWARF(ef) {
		// A Go binary built with -ldflags=-s -w keeps .gopclntab, which
		// has every function and its lines.
		if tab := goTable(ef); tab != nil {
			if symFile.Section(".symtab") == nil {
				for i := range tab.Funcs {
					fn := &tab.Funcs[i]
					add(fn.Entry, fn.End, fn.Name, kindSymbol)
				}
			}
			if !hasDWARF(ef) && (f.debug == nil || !hasDWARF(f.debug)) {
				f.gotab = tab
			}
		}
	}

	// Unwind tables of the file itself: a debug file's .eh_frame is
	// NOBITS.
	fdes, _ := ehFrameRanges(ef)
	for _, r := range fdes {
		add(r.lo, r.hi, "", kindFDE)
	}

	f.funcs = entries
	f.spans = flatten(raw, func(a, b span) bool {
		ka, kb := entries[a.id].kind, entries[b.id].kind
		if ka != kb {
			return ka < kb
		}
		// Nested ranges: the innermost owns its addresses.
		if la, lb := a.hi-a.lo, b.hi-b.lo; la != lb {
			return la < lb
		}
		return a.id < b.id
	})
}

func hasDWARF(ef *elf.File) bool {
	for _, name := range []string{".debug_info", ".zdebug_info"} {
		if s := ef.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			return true
		}
	}
	return false
}

// buildID returns the NT_GNU_BUILD_ID note's descriptor, or nil.
func buildID(ef *elf.File) []byte {
	var notes []io.ReaderAt
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_NOTE {
			notes = append(notes, s)
		}
	}
	if len(notes) == 0 {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_NOTE {
				notes = append(notes, p)
			}
		}
	}
	for _, n := range notes {
		var data []byte
		switch n := n.(type) {
		case *elf.Section:
			if n.Size > 1<<20 {
				continue
			}
			data, _ = n.Data()
		case *elf.Prog:
			if n.Filesz > 1<<20 {
				continue
			}
			data = make([]byte, n.Filesz)
			if _, err := n.ReadAt(data, 0); err != nil {
				continue
			}
		}
		if id := findBuildIDNote(data, ef.ByteOrder); id != nil {
			return id
		}
	}
	return nil
}

func findBuildIDNote(data []byte, order interface{ Uint32([]byte) uint32 }) []byte {
	const ntGNUBuildID = 3
	align4 := func(n uint64) uint64 { return (n + 3) &^ 3 }
	for len(data) >= 12 {
		namesz := uint64(order.Uint32(data[0:]))
		descsz := uint64(order.Uint32(data[4:]))
		typ := order.Uint32(data[8:])
		data = data[12:]
		nameEnd := align4(namesz)
		if nameEnd > uint64(len(data)) || descsz > uint64(len(data))-nameEnd {
			return nil
		}
		name := data[:namesz]
		desc := data[nameEnd : nameEnd+descsz]
		if typ == ntGNUBuildID && string(name) == "GNU\x00" && len(desc) > 0 {
			return slices.Clone(desc)
		}
		next := nameEnd + align4(descsz)
		if next > uint64(len(data)) {
			return nil
		}
		data = data[next:]
	}
	return nil
}

// findDebugFile looks for separate debug information, first by build id,
// then through .gnu_debuglink (checking its CRC), as gdb does.
func findDebugFile(path, dir string, ef *elf.File, id []byte) (*elf.File, string) {
	if len(id) >= 2 {
		h := hex.EncodeToString(id)
		p := filepath.Join(dir, ".build-id", h[:2], h[2:]+".debug")
		if df, err := elf.Open(p); err == nil {
			if bytes.Equal(buildID(df), id) {
				return df, p
			}
			df.Close()
		}
	}
	s := ef.Section(".gnu_debuglink")
	if s == nil || s.Size > 4096 {
		return nil, ""
	}
	data, err := s.Data()
	if err != nil {
		return nil, ""
	}
	i := bytes.IndexByte(data, 0)
	if i <= 0 {
		return nil, ""
	}
	name := string(data[:i])
	if strings.Contains(name, "/") {
		return nil, ""
	}
	crcOff := (i + 4) &^ 3
	if crcOff+4 > len(data) {
		return nil, ""
	}
	want := ef.ByteOrder.Uint32(data[crcOff:])
	pdir := filepath.Dir(path)
	if abs, err := filepath.Abs(pdir); err == nil {
		pdir = abs
	}
	for _, p := range []string{
		filepath.Join(pdir, name),
		filepath.Join(pdir, ".debug", name),
		filepath.Join(dir, pdir, name),
	} {
		if p == path {
			continue
		}
		if crc, err := fileCRC(p); err != nil || crc != want {
			continue
		}
		if df, err := elf.Open(p); err == nil {
			return df, p
		}
	}
	return nil, ""
}

func fileCRC(path string) (uint32, error) {
	fd, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fd.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, fd); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}

type symbol struct {
	lo, hi   uint64
	size     uint64
	name     string
	bind     elf.SymBind
	typ      elf.SymType
	section  elf.SectionIndex
	secLimit uint64 // end of the symbol's section
}

// collectSymbols returns the code symbols of one table of ef. Unsized
// symbols get hi = 0 and are sized later by chooseSymbols.
func collectSymbols(ef *elf.File, table func() ([]elf.Symbol, error)) []symbol {
	all, err := table()
	if err != nil {
		return nil
	}
	var out []symbol
	for _, s := range all {
		typ := elf.ST_TYPE(s.Info)
		switch typ {
		case elf.STT_FUNC, elf.STT_GNU_IFUNC:
		case elf.STT_NOTYPE:
			// Unsized NOTYPE symbols are mostly markers such as
			// runtime.text or _end: they would only shadow real names.
			if s.Size == 0 {
				continue
			}
		default:
			continue
		}
		if s.Value == 0 || s.Name == "" || s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE {
			continue
		}
		if int(s.Section) >= len(ef.Sections) {
			continue
		}
		sec := ef.Sections[s.Section]
		if sec.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		sym := symbol{
			lo:       s.Value,
			size:     s.Size,
			name:     s.Name,
			bind:     elf.ST_BIND(s.Info),
			typ:      typ,
			section:  s.Section,
			secLimit: sec.Addr + sec.Size,
		}
		if s.Size > 0 {
			sym.hi = s.Value + s.Size
			if sym.hi < sym.lo {
				continue
			}
		}
		out = append(out, sym)
	}
	return out
}

// symbolOrder sorts symbols by start address and, among the aliases of
// an address, puts the preferred name first: a sized symbol, then global
// over weak over local, then the shortest name, then the
// lexicographically smallest, so that the choice does not depend on
// table order.
func symbolOrder(a, b symbol) int {
	if a.lo != b.lo {
		return cmp.Compare(a.lo, b.lo)
	}
	if (a.size > 0) != (b.size > 0) {
		if a.size > 0 {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(bindRank(a.bind), bindRank(b.bind)),
		cmp.Compare(len(a.name), len(b.name)), strings.Compare(a.name, b.name))
}

// bindRank ranks a symbol's binding for symbolOrder: global first, then
// weak, then local.
func bindRank(b elf.SymBind) int {
	switch b {
	case elf.STB_GLOBAL:
		return 0
	case elf.STB_WEAK:
		return 1
	}
	return 2
}

// chooseSymbols keeps one symbol per start address, the first in
// symbolOrder, and gives unsized symbols the range up to the next symbol
// (within their section).
func chooseSymbols(syms []symbol) []symbol {
	slices.SortFunc(syms, symbolOrder)
	out := syms[:0]
	for i, s := range syms {
		if i > 0 && s.lo == syms[i-1].lo {
			continue
		}
		out = append(out, s)
	}
	for i := range out {
		if out[i].hi != 0 {
			continue
		}
		hi := out[i].secLimit
		if i+1 < len(out) && out[i+1].lo < hi {
			hi = out[i+1].lo
		}
		out[i].hi = hi
	}
	return out
}

// goTable decodes .gopclntab, or returns nil. It recovers from panics in
// debug/gosym: the table comes from an untrusted file.
func goTable(ef *elf.File) (tab *gosym.Table) {
	s := ef.Section(".gopclntab")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil
	}
	data, err := s.Data()
	if err != nil {
		return nil
	}
	var text uint64
	if t := ef.Section(".text"); t != nil {
		text = t.Addr
	}
	defer func() {
		if recover() != nil {
			tab = nil
		}
	}()
	tab, err = gosym.NewTable(nil, gosym.NewLineTable(data, text))
	if err != nil || len(tab.Funcs) == 0 {
		return nil
	}
	return tab
}

// ehFrameRanges returns the FDE ranges of ef's .eh_frame, found through
// the section header or, without one, through PT_GNU_EH_FRAME.
func ehFrameRanges(ef *elf.File) ([]fdeRange, error) {
	sec, err := ehFrameSection(ef)
	if err != nil || sec.data == nil {
		return nil, err
	}
	return parseEHFrame(sec.data, ef.ByteOrder, sec.ptrSize, sec.bases)
}

// ehFrame is the contents of an .eh_frame section and what decoding it
// needs.
type ehFrame struct {
	data    []byte
	ptrSize int
	bases   ehBases
}

// ehFrameSection reads ef's .eh_frame, found through the section header
// or, without one, through PT_GNU_EH_FRAME. Its data is nil when the file
// has none.
func ehFrameSection(ef *elf.File) (ehFrame, error) {
	sec := ehFrame{ptrSize: 8}
	if ef.Class == elf.ELFCLASS32 {
		sec.ptrSize = 4
	}
	if t := ef.Section(".text"); t != nil {
		sec.bases.text = t.Addr
	}
	if g := ef.Section(".got"); g != nil {
		sec.bases.data = g.Addr
	}
	if s := ef.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		data, err := s.Data()
		if err != nil {
			return ehFrame{}, err
		}
		sec.data = data
		sec.bases.section = s.Addr
		return sec, nil
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_GNU_EH_FRAME || p.Filesz > 1<<30 {
			continue
		}
		hdr := make([]byte, min(p.Filesz, 64))
		if _, err := p.ReadAt(hdr, 0); err != nil {
			return ehFrame{}, err
		}
		addr, err := parseEHFrameHdr(hdr, ef.ByteOrder, sec.ptrSize, p.Vaddr)
		if err != nil {
			return ehFrame{}, err
		}
		// .eh_frame runs to its terminator, at most to the end of the
		// segment holding it.
		for _, l := range ef.Progs {
			if l.Type != elf.PT_LOAD || addr < l.Vaddr || addr >= l.Vaddr+l.Filesz {
				continue
			}
			n := l.Vaddr + l.Filesz - addr
			if n > 1<<30 {
				return ehFrame{}, errors.New("eh_frame segment too large")
			}
			data := make([]byte, n)
			if _, err := l.ReadAt(data, int64(addr-l.Vaddr)); err != nil {
				return ehFrame{}, err
			}
			sec.data = data
			sec.bases.section = addr
			return sec, nil
		}
	}
	return ehFrame{}, nil
}

// VAddr converts a file offset to the ELF virtual address it is loaded
// at, reporting false (and the offset unchanged) for an offset outside
// every PT_LOAD segment.
func (f *File) VAddr(off uint64) (uint64, bool) {
	for _, p := range f.loads {
		if off >= p.Off && off-p.Off < p.Filesz {
			return off - p.Off + p.Vaddr, true
		}
	}
	return off, false
}

// Resolve maps a file offset (ip - mapping start + mapping page offset,
// as PERF_RECORD_MMAP2 gives them) to frames, innermost inlined frame
// first and the physical function last, and also returns the ELF virtual
// address the offset is loaded at. For a return address the caller should
// pass the offset of the call instruction (ip-1) to get the call's line.
//
// The result is never empty: an address outside every known function is
// named "BASENAME+0xVADDR", and code known only from an .eh_frame FDE is
// named "BASENAME+0xSTART" after the FDE's start. An offset outside every
// PT_LOAD segment is returned as the vaddr unchanged. The returned slice
// is shared with later calls and must not be modified.
//
// In a Go binary without DWARF (built with -ldflags=-w), lines come from
// .gopclntab, which has no inline tree: the single frame has the physical
// function's name and the position of the innermost inlined code.
func (f *File) Resolve(fileOffset uint64) (frames []Frame, vaddr uint64) {
	f.nameTable()
	pc, _ := f.VAddr(fileOffset)
	f.mu.Lock()
	defer f.mu.Unlock()
	if fr, ok := f.cache[pc]; ok {
		return fr, pc
	}
	frames = f.resolve(pc)
	if len(f.cache) >= maxCache {
		clear(f.cache)
	}
	f.cache[pc] = frames
	return frames, pc
}

// resolve does the work of Resolve for a vaddr; f.mu is held.
func (f *File) resolve(pc uint64) []Frame {
	// The physical function's name: a symbol if one covers pc, else an
	// FDE's start, else the address itself. DWARF may still add inlined
	// frames and lines, and replaces the last two kinds of name.
	name, symbolic := "", false
	if i := findSpan(f.spans, pc); i >= 0 {
		fe := &f.funcs[f.spans[i].id]
		if fe.kind == kindSymbol {
			symbolic = true
		} else if fe.name == "" {
			// Named on first use: most FDEs are never hit.
			fe.name = addrName(f.base, fe.start)
		}
		name = fe.name
	}

	if name == "" {
		name = addrName(f.base, pc)
	}

	if frames := f.debugFrames(pc, name, symbolic); len(frames) > 0 {
		return frames
	}
	return []Frame{{Function: name}}
}

// debugFrames returns frames with lines from .gopclntab or DWARF, or nil;
// f.mu is held. Both are decoded by the standard library from an
// untrusted file: a panic there disables that source for this file
// instead of crashing the recorder.
func (f *File) debugFrames(pc uint64, name string, symbolic bool) (frames []Frame) {
	defer func() {
		if r := recover(); r != nil {
			f.gotab, f.dw = nil, nil
			f.dwarfErr = fmt.Errorf("%w: decoder panic: %v", ErrFormat, r)
			frames = nil
		}
	}()
	if f.gotab != nil {
		file, line, fn := f.gotab.PCToLine(pc)
		if fn != nil {
			if !symbolic {
				name = fn.Name
			}
			return []Frame{{Function: name, File: file, Line: line}}
		}
	}
	if dw := f.dwarf(); dw != nil {
		return dw.frames(pc, name, symbolic)
	}
	return nil
}

// dwarf returns the DWARF index, loading it on first use; f.mu is held.
func (f *File) dwarf() *dwarfInfo {
	if f.dwarfDone {
		return f.dw
	}
	f.dwarfDone = true
	src := f.elf
	if f.debug != nil && hasDWARF(f.debug) {
		src = f.debug
	} else if !hasDWARF(src) {
		return nil
	}
	d, err := src.DWARF()
	if err != nil {
		f.dwarfErr = err
		return nil
	}
	f.dw, f.dwarfErr = newDWARFInfo(d)
	return f.dw
}

// DWARFError returns why DWARF information could not be used, or nil if it
// was used, is absent, or was not needed yet.
func (f *File) DWARFError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dwarfErr
}

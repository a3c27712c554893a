package symbolize

import (
	"cmp"
	"debug/dwarf"
	"fmt"
	"slices"
)

// FunctionCode is what the debug information says about the code of one
// function: its address range, where it is declared and which source
// lines its instructions belong to. Source views use it to tell lines
// with code from lines without (comments, blank lines) and to open a
// function at its declaration.
type FunctionCode struct {
	Name string // the symbol's name, demangled
	// Entry is the function's start address; [Lo, Hi) its code (ELF
	// virtual addresses).
	Entry, Lo, Hi uint64
	// DeclFile and DeclLine are the subprogram's DW_AT_decl_file and
	// DW_AT_decl_line, following its abstract origin or specification;
	// "" and 0 when DWARF does not say.
	DeclFile string
	DeclLine int
	// Rows are the line table's ranges inside [Lo, Hi), in address order:
	// the code from Lo to Hi is at File:Line. Rows without a line are
	// left out.
	Rows []CodeRow
}

// CodeRow is one range of a function's code and its source position.
type CodeRow struct {
	Lo, Hi uint64
	File   string
	Line   int
}

// FunctionCode describes the function whose symbol contains fileOffset,
// from its symbol and DWARF. It reports false when no symbol contains
// the offset; Rows and Decl* are empty without DWARF (a Go binary's
// .gopclntab has no declaration lines, and it is not used here).
func (f *File) FunctionCode(fileOffset uint64) (FunctionCode, bool) {
	fcs := f.FunctionCodes([]uint64{fileOffset})
	return fcs[0], fcs[0].Name != ""
}

// FunctionCodes is FunctionCode for many offsets at once, reading each
// compilation unit's declarations once; a zero FunctionCode (Name "")
// stands for an offset no symbol contains.
func (f *File) FunctionCodes(fileOffsets []uint64) (fcs []FunctionCode) {
	f.nameTable()
	fcs = make([]FunctionCode, len(fileOffsets))
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, off := range fileOffsets {
		pc, _ := f.VAddr(off)
		if i := findSpan(f.spans, pc); i >= 0 {
			if fe := &f.funcs[f.spans[i].id]; fe.kind == kindSymbol {
				fcs[k] = FunctionCode{Name: fe.name, Entry: fe.start, Lo: f.spans[i].lo, Hi: f.spans[i].hi}
			}
		}
	}
	defer func() {
		// The standard library decodes untrusted DWARF: keep what the
		// symbols say if it panics.
		if r := recover(); r != nil {
			f.gotab, f.dw = nil, nil
			f.dwarfErr = fmt.Errorf("%w: decoder panic: %v", ErrFormat, r)
			for k := range fcs {
				fcs[k].DeclFile, fcs[k].DeclLine, fcs[k].Rows = "", 0, nil
			}
		}
	}()
	if f.gotab != nil {
		return fcs
	}
	dw := f.dwarf()
	if dw == nil {
		return fcs
	}
	decls := map[*unitData]map[uint64]declPos{}
	for k := range fcs {
		fc := &fcs[k]
		if fc.Name == "" {
			continue
		}
		j := findSpan(dw.spans, fc.Entry)
		if j < 0 {
			continue
		}
		u := &dw.units[dw.spans[j].id]
		if u.data == nil {
			u.data = dw.loadUnit(u.entry)
		}
		ud := u.data
		first, _ := slices.BinarySearchFunc(ud.rows, fc.Lo, func(r lineRow, pc uint64) int { return cmp.Compare(r.addr, pc) })
		// The row in effect at Lo may start before it.
		if first > 0 && (first == len(ud.rows) || ud.rows[first].addr > fc.Lo) {
			first--
		}
		for i := first; i < len(ud.rows) && ud.rows[i].addr < fc.Hi; i++ {
			r := ud.rows[i]
			if r.end || r.line <= 0 || r.file < 0 {
				continue
			}
			lo, hi := max(r.addr, fc.Lo), fc.Hi
			if i+1 < len(ud.rows) {
				hi = min(hi, ud.rows[i+1].addr)
			}
			if lo < hi {
				fc.Rows = append(fc.Rows, CodeRow{Lo: lo, Hi: hi, File: ud.files[r.file], Line: int(r.line)})
			}
		}
		d, ok := decls[ud]
		if !ok {
			d = dw.declarations(u.entry, ud)
			decls[ud] = d
		}
		if p, ok := d[fc.Entry]; ok {
			fc.DeclFile, fc.DeclLine = p.file, p.line
		}
	}
	return fcs
}

type declPos struct {
	file string
	line int
}

// declarations maps the start of each range of each subprogram of unit
// cu to the subprogram's declaration.
func (dw *dwarfInfo) declarations(cu *dwarf.Entry, ud *unitData) map[uint64]declPos {
	out := map[uint64]declPos{}
	r := dw.d.Reader()
	r.Seek(cu.Offset)
	if e, err := r.Next(); err != nil || e == nil || !e.Children {
		return out
	}
	for depth := 1; depth > 0; {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == 0 {
			depth--
			continue
		}
		if e.Tag == dwarf.TagSubprogram {
			if ranges, err := dw.d.Ranges(e); err == nil && len(ranges) > 0 {
				if file, line := dw.declOf(e, ud, 0); line > 0 {
					for _, rg := range ranges {
						out[rg[0]] = declPos{file, line}
					}
				}
			}
		}
		if e.Children {
			depth++
		}
	}
	return out
}

// declOf reads an entry's decl_file and decl_line, following its
// abstract origin or specification when it has none. A reference to
// another unit gives no file: decl_file indexes that unit's table.
func (dw *dwarfInfo) declOf(e *dwarf.Entry, ud *unitData, depth int) (string, int) {
	line, _ := e.Val(dwarf.AttrDeclLine).(int64)
	if line > 0 {
		file := ""
		if fi, ok := e.Val(dwarf.AttrDeclFile).(int64); ok && ud != nil && fi >= 0 && fi < int64(len(ud.files)) {
			file = ud.files[fi]
		}
		return file, int(line)
	}
	if depth > 8 {
		return "", 0
	}
	for _, a := range []dwarf.Attr{dwarf.AttrAbstractOrigin, dwarf.AttrSpecification} {
		ref, ok := e.Val(a).(dwarf.Offset)
		if !ok {
			continue
		}
		r := dw.d.Reader()
		r.Seek(ref)
		t, err := r.Next()
		if err != nil || t == nil || t.Offset != ref {
			continue
		}
		if file, line := dw.declOf(t, ud, depth+1); line > 0 {
			return file, line
		}
	}
	return "", 0
}

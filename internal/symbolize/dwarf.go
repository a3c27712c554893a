package symbolize

import (
	"debug/dwarf"
	"slices"
)

// dwarfInfo indexes DWARF by compilation unit; a unit's lines and inline
// tree are decoded on the first lookup inside it and kept.
type dwarfInfo struct {
	d     *dwarf.Data
	units []dwarfUnit
	spans []span // flattened unit ranges, id = index into units
}

type dwarfUnit struct {
	entry *dwarf.Entry
	data  *unitData // nil until loaded
}

// unitData is the decoded part of one compilation unit.
type unitData struct {
	rows  []lineRow
	files []string
	nodes []funcNode
	top   []span // flattened ranges of concrete subprograms, id = node
	// nodeRanges holds every node's ranges, id = node.
	nodeRanges []span
}

type lineRow struct {
	addr uint64
	file int32 // index into unitData.files
	line int32
	end  bool // end of a sequence: no line from here on
}

// funcNode is a concrete subprogram or an inlined subroutine.
type funcNode struct {
	name        string
	callFile    string // where the parent called this inlined code
	callLine    int32
	ranges      [2]int32 // [first, last) into unitData.nodeRanges
	firstChild  int32    // -1 if none
	nextSibling int32    // -1 if none
}

func newDWARFInfo(d *dwarf.Data) (*dwarfInfo, error) {
	dw := &dwarfInfo{d: d}
	r := d.Reader()
	var raw []span
	var firstErr error
	for {
		e, err := r.Next()
		if err != nil {
			// Units before the damage stay usable.
			firstErr = err
			break
		}
		if e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			ranges, err := d.Ranges(e)
			if err == nil {
				for _, rg := range ranges {
					raw = append(raw, span{lo: rg[0], hi: rg[1], id: int32(len(dw.units))})
				}
			}
			dw.units = append(dw.units, dwarfUnit{entry: e})
		}
		r.SkipChildren()
	}
	dw.spans = flatten(raw, smallerSpan)
	if len(dw.units) == 0 {
		return nil, firstErr
	}
	return dw, firstErr
}

func smallerSpan(a, b span) bool {
	if la, lb := a.hi-a.lo, b.hi-b.lo; la != lb {
		return la < lb
	}
	return a.id < b.id
}

// frames returns the inline chain at pc, innermost first, or nil if no
// unit covers pc. The physical frame is named name when symbolic (a
// symbol covers pc) and by DWARF otherwise, falling back to name.
func (dw *dwarfInfo) frames(pc uint64, name string, symbolic bool) []Frame {
	i := findSpan(dw.spans, pc)
	if i < 0 {
		return nil
	}
	u := &dw.units[dw.spans[i].id]
	if u.data == nil {
		u.data = dw.loadUnit(u.entry)
	}
	ud := u.data
	file, line := ud.line(pc)

	var chainBuf [16]int32
	chain := chainBuf[:0]
	if j := findSpan(ud.top, pc); j >= 0 {
		n := ud.top[j].id
		chain = append(chain, n)
		// Descend into the inlined subroutine that covers pc, if any.
		for depth := 0; depth < 1000; depth++ {
			next := int32(-1)
			for c := ud.nodes[n].firstChild; c >= 0; c = ud.nodes[c].nextSibling {
				if ud.covers(c, pc) {
					next = c
					break
				}
			}
			if next < 0 {
				break
			}
			chain = append(chain, next)
			n = next
		}
	}
	if len(chain) == 0 {
		if file == "" {
			return nil
		}
		return []Frame{{Function: name, File: file, Line: line}}
	}
	frames := make([]Frame, len(chain))
	for k := len(chain) - 1; k >= 0; k-- {
		fr := &frames[len(chain)-1-k]
		fr.Function = ud.nodes[chain[k]].name
		if k == len(chain)-1 {
			fr.File, fr.Line = file, line
		} else {
			inner := &ud.nodes[chain[k+1]]
			fr.File, fr.Line = inner.callFile, int(inner.callLine)
		}
	}
	phys := &frames[len(frames)-1]
	if symbolic || phys.Function == "" {
		phys.Function = name
	}
	for k := range frames {
		if frames[k].Function == "" {
			frames[k].Function = "??"
		}
	}
	return frames
}

func (ud *unitData) covers(n int32, pc uint64) bool {
	rg := ud.nodes[n].ranges
	for _, s := range ud.nodeRanges[rg[0]:rg[1]] {
		if s.lo <= pc && pc < s.hi {
			return true
		}
	}
	return false
}

// line returns the line table's position for pc, or "", 0.
func (ud *unitData) line(pc uint64) (string, int) {
	i, found := slices.BinarySearchFunc(ud.rows, pc, func(r lineRow, pc uint64) int {
		switch {
		case r.addr < pc:
			return -1
		case r.addr > pc:
			return 1
		}
		return 0
	})
	// BinarySearchFunc gives the first row at pc; the last one at pc is
	// the one in effect.
	if found {
		for i+1 < len(ud.rows) && ud.rows[i+1].addr == pc {
			i++
		}
	} else {
		i--
	}
	if i < 0 || ud.rows[i].end {
		return "", 0
	}
	r := ud.rows[i]
	if r.file < 0 {
		return "", int(r.line)
	}
	return ud.files[r.file], int(r.line)
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, which older GCC emits
// instead of DW_AT_linkage_name.
const attrMIPSLinkageName dwarf.Attr = 0x2007

// nameInfo is what naming a subprogram DIE needs.
type nameInfo struct {
	name, linkage string
	origin, spec  dwarf.Offset // 0 if absent
}

func entryNameInfo(e *dwarf.Entry) nameInfo {
	var ni nameInfo
	for _, f := range e.Field {
		switch f.Attr {
		case dwarf.AttrName:
			ni.name, _ = f.Val.(string)
		case dwarf.AttrLinkageName, attrMIPSLinkageName:
			ni.linkage, _ = f.Val.(string)
		case dwarf.AttrAbstractOrigin:
			ni.origin, _ = f.Val.(dwarf.Offset)
		case dwarf.AttrSpecification:
			ni.spec, _ = f.Val.(dwarf.Offset)
		}
	}
	return ni
}

// loadUnit decodes the line table and the subprogram/inline tree of one
// unit. Errors leave the part decoded so far.
func (dw *dwarfInfo) loadUnit(cu *dwarf.Entry) *unitData {
	ud := &unitData{}
	dw.loadLines(ud, cu)

	r := dw.d.Reader()
	r.Seek(cu.Offset)
	if e, err := r.Next(); err != nil || e == nil || !e.Children {
		return ud
	}
	names := make(map[dwarf.Offset]nameInfo)
	var own []nameInfo // per node
	var callFiles []int64
	// stack[d] is the node enclosing depth d, or -1.
	stack := []int32{-1}
	lastChild := make(map[int32]int32)
	var topRaw []span
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		parent := stack[len(stack)-1]
		enclosing := parent
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			ni := entryNameInfo(e)
			if e.Tag == dwarf.TagSubprogram {
				names[e.Offset] = ni
			}
			ranges, err := dw.d.Ranges(e)
			if err != nil || len(ranges) == 0 {
				break
			}
			if e.Tag == dwarf.TagSubprogram {
				// Nested functions (GNU C, lambdas) are functions of their
				// own, not inlined code.
				parent = -1
			} else if parent < 0 {
				break
			}
			n := int32(len(ud.nodes))
			first := int32(len(ud.nodeRanges))
			for _, rg := range ranges {
				ud.nodeRanges = append(ud.nodeRanges, span{lo: rg[0], hi: rg[1], id: n})
				if parent < 0 {
					topRaw = append(topRaw, span{lo: rg[0], hi: rg[1], id: n})
				}
			}
			node := funcNode{ranges: [2]int32{first, int32(len(ud.nodeRanges))}, firstChild: -1, nextSibling: -1}
			var cf int64 = -1
			if v, ok := e.Val(dwarf.AttrCallLine).(int64); ok {
				node.callLine = int32(v)
			}
			if v, ok := e.Val(dwarf.AttrCallFile).(int64); ok {
				cf = v
			}
			ud.nodes = append(ud.nodes, node)
			own = append(own, ni)
			callFiles = append(callFiles, cf)
			if parent >= 0 {
				if last, ok := lastChild[parent]; ok {
					ud.nodes[last].nextSibling = n
				} else {
					ud.nodes[parent].firstChild = n
				}
				lastChild[parent] = n
			}
			enclosing = n
		}
		if e.Children {
			stack = append(stack, enclosing)
		}
	}
	ud.top = flatten(topRaw, smallerSpan)

	for i := range ud.nodes {
		ud.nodes[i].name = dw.resolveName(own[i], names, 0)
		if cf := callFiles[i]; cf >= 0 && cf < int64(len(ud.files)) {
			ud.nodes[i].callFile = ud.files[cf]
		}
	}
	return ud
}

// resolveName names a DIE: its linkage name demangled (which keeps C++
// scopes and parameters), else its name, else its abstract origin's or
// specification's name. Origins outside the unit are read on demand.
func (dw *dwarfInfo) resolveName(ni nameInfo, names map[dwarf.Offset]nameInfo, depth int) string {
	if ni.linkage != "" {
		return Demangle(ni.linkage)
	}
	if ni.name != "" && ni.origin == 0 && ni.spec == 0 {
		return ni.name
	}
	if depth > 8 {
		return ni.name
	}
	for _, ref := range []dwarf.Offset{ni.origin, ni.spec} {
		if ref == 0 {
			continue
		}
		target, ok := names[ref]
		if !ok {
			r := dw.d.Reader()
			r.Seek(ref)
			e, err := r.Next()
			if err != nil || e == nil || e.Offset != ref {
				continue
			}
			target = entryNameInfo(e)
			names[ref] = target
		}
		if s := dw.resolveName(target, names, depth+1); s != "" {
			return s
		}
	}
	return ni.name
}

func (dw *dwarfInfo) loadLines(ud *unitData, cu *dwarf.Entry) {
	lr, err := dw.d.LineReader(cu)
	if err != nil || lr == nil {
		return
	}
	fileIdx := make(map[*dwarf.LineFile]int32)
	var le dwarf.LineEntry
	for {
		if err := lr.Next(&le); err != nil {
			break
		}
		fi := int32(-1)
		if le.File != nil {
			idx, ok := fileIdx[le.File]
			if !ok {
				idx = int32(len(ud.files))
				ud.files = append(ud.files, le.File.Name)
				fileIdx[le.File] = idx
			}
			fi = idx
		}
		ud.rows = append(ud.rows, lineRow{addr: le.Address, file: fi, line: int32(le.Line), end: le.EndSequence})
	}
	// Index the unit's file table as call_file attributes do, keeping the
	// names the rows already refer to.
	rowFiles := ud.files
	table := lr.Files()
	ud.files = make([]string, 0, len(table)+len(rowFiles))
	for _, lf := range table {
		name := ""
		if lf != nil {
			name = lf.Name
		}
		ud.files = append(ud.files, name)
	}
	base := int32(len(ud.files))
	ud.files = append(ud.files, rowFiles...)
	for i := range ud.rows {
		if ud.rows[i].file >= 0 {
			ud.rows[i].file += base
		}
	}
	// Sequences may come in any order. At an address where one sequence
	// ends and another starts, the end must sort first; within a sequence
	// the stable sort keeps the later row at an address last, and that
	// row is the one in effect.
	slices.SortStableFunc(ud.rows, func(a, b lineRow) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		case a.end && !b.end:
			return -1
		case !a.end && b.end:
			return 1
		}
		return 0
	})
}

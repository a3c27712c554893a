package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// cfiCIE describes the CIE of a synthetic .eh_frame built by synthCFI.
type cfiCIE struct {
	codeAlign byte // ULEB128 < 0x80
	dataAlign byte // SLEB128 in one byte: 0x78 is -8
	raReg     byte
	insns     []byte
}

// x86CIE is what GCC and Clang emit on x86-64: CFA = rsp+8, return
// address at CFA-8.
var x86CIE = cfiCIE{codeAlign: 1, dataAlign: 0x78, raReg: dwarfRA, insns: []byte{
	cfaDefCFA, dwarfRSP, 8,
	cfaOffset | dwarfRA, 1,
}}

const (
	synthLo   = 0x1000 // range of the synthetic FDE
	synthSize = 0x100
)

// synthCFI returns an .eh_frame (loaded at 0x10000, 'zR' with udata4
// pointers) holding cie and one FDE for [synthLo, synthLo+synthSize) with
// the program prog. Entries are not padded, so that a truncated program
// stays truncated.
func synthCFI(cie cfiCIE, prog []byte) []byte {
	var out []byte
	entry := func(body []byte) {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(body)))
		out = append(out, body...)
	}
	body := []byte{0, 0, 0, 0, 1, 'z', 'R', 0, cie.codeAlign, cie.dataAlign, cie.raReg, 1, peUdata4}
	entry(append(body, cie.insns...))
	body = binary.LittleEndian.AppendUint32(nil, uint32(len(out)+4)) // back to the CIE
	body = binary.LittleEndian.AppendUint32(body, synthLo)
	body = binary.LittleEndian.AppendUint32(body, synthSize)
	body = append(body, 0) // augmentation data length
	entry(append(body, prog...))
	return out
}

// synthTable indexes synthCFI's output.
func synthTable(t testing.TB, cie cfiCIE, prog []byte) *cfaTable {
	t.Helper()
	tab := newCFATable(synthCFI(cie, prog), binary.LittleEndian, 8, ehBases{section: 0x10000})
	if tab == nil {
		t.Fatal("no FDE in synthetic .eh_frame")
	}
	return tab
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

type cfaProbe struct {
	pc   uint64
	want CFARule
	ok   bool
}

func rsp(off int64) cfaProbe { return cfaProbe{want: CFARule{dwarfRSP, off}, ok: true} }
func rbp(off int64) cfaProbe { return cfaProbe{want: CFARule{dwarfRBP, off}, ok: true} }

var noCFA = cfaProbe{}

// at places a probe at synthLo+off.
func (p cfaProbe) at(off uint64) cfaProbe { p.pc = synthLo + off; return p }

func TestCFAOpcodes(t *testing.T) {
	withCIE := func(c cfiCIE, insns ...byte) cfiCIE { c.insns = insns; return c }
	otherAlign := x86CIE
	otherAlign.codeAlign, otherAlign.dataAlign = 4, 0x7c // -4
	otherAlign.insns = []byte{cfaDefCFA, dwarfRSP, 8, cfaOffset | dwarfRA, 2}
	tests := []struct {
		name   string
		cie    cfiCIE
		prog   []byte
		probes []cfaProbe
	}{
		{"CIE initial rule", x86CIE, nil, []cfaProbe{rsp(8).at(0), rsp(8).at(synthSize - 1)}},
		{"outside the FDE", x86CIE, nil, []cfaProbe{noCFA.at(^uint64(0) - synthLo + 1), noCFA.at(synthSize), {pc: 0}}},
		{"advance_loc and def_cfa_offset", x86CIE, []byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaAdvanceLoc | 3, cfaDefCFAOffset, 0xa0, 0x01},
			[]cfaProbe{rsp(8).at(0), rsp(16).at(1), rsp(16).at(3), rsp(160).at(4), rsp(160).at(0xff)}},
		{"advance_loc1/2/4", x86CIE, cat(
			[]byte{cfaAdvanceLoc1, 0x10, cfaDefCFAOffset, 16},
			[]byte{cfaAdvanceLoc2, 0x10, 0x00, cfaDefCFAOffset, 24},
			[]byte{cfaAdvanceLoc4, 0x10, 0x00, 0x00, 0x00, cfaDefCFAOffset, 32}),
			[]cfaProbe{rsp(8).at(0xf), rsp(16).at(0x10), rsp(16).at(0x1f), rsp(24).at(0x20), rsp(32).at(0x30)}},
		{"advance past the FDE", x86CIE, []byte{cfaAdvanceLoc4, 0xff, 0xff, 0xff, 0xff, cfaDefCFAOffset, 16},
			[]cfaProbe{rsp(8).at(0xff)}},
		{"set_loc", x86CIE, cat([]byte{cfaSetLoc}, le32(synthLo+0x40), []byte{cfaDefCFAOffset, 16}),
			[]cfaProbe{rsp(8).at(0x3f), rsp(16).at(0x40)}},
		{"code and data alignment factors", otherAlign, []byte{cfaAdvanceLoc | 2, cfaDefCFAOffsetSF, 0x7c}, // -4 * -4
			[]cfaProbe{rsp(8).at(7), rsp(16).at(8)}},
		{"def_cfa_register keeps the offset", x86CIE, []byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaAdvanceLoc | 3, cfaDefCFARegister, dwarfRBP},
			[]cfaProbe{rsp(16).at(1), rbp(16).at(4)}},
		{"def_cfa", x86CIE, []byte{cfaAdvanceLoc | 1, cfaDefCFA, dwarfRBP, 0x10},
			[]cfaProbe{rsp(8).at(0), rbp(16).at(1)}},
		{"def_cfa_sf is factored", x86CIE, []byte{cfaDefCFASF, dwarfRSP, 0x7e}, []cfaProbe{rsp(16).at(0)}},
		{"def_cfa_offset_sf is factored", x86CIE, []byte{cfaDefCFAOffsetSF, 0x7d}, []cfaProbe{rsp(24).at(0)}},
		{"def_cfa_expression", x86CIE, []byte{cfaAdvanceLoc | 1, cfaDefCFAExpression, 2, 0x77, 0x08, cfaAdvanceLoc | 1, cfaDefCFA, dwarfRSP, 8},
			[]cfaProbe{rsp(8).at(0), noCFA.at(1), rsp(8).at(2)}},
		{"remember_state and restore_state", x86CIE, []byte{
			cfaAdvanceLoc | 1, cfaDefCFAOffset, 16,
			cfaAdvanceLoc | 1, cfaRememberState, cfaDefCFAOffset, 8,
			cfaAdvanceLoc | 1, cfaRestoreState},
			[]cfaProbe{rsp(8).at(0), rsp(16).at(1), rsp(8).at(2), rsp(16).at(3)}},
		{"remember_state keeps the return address rule", x86CIE, []byte{
			cfaRememberState, cfaUndefined, dwarfRA,
			cfaAdvanceLoc | 1, cfaRestoreState},
			[]cfaProbe{noCFA.at(0), rsp(8).at(1)}},
		{"register rules are decoded and skipped", x86CIE, cat(
			[]byte{cfaOffset | dwarfRBP, 2, cfaRestore | dwarfRBP, cfaNop},
			[]byte{cfaOffsetExtended, 3, 0x83, 0x01, cfaRestoreExtended, 3},
			[]byte{cfaUndefined, 0x81, 0x01, cfaSameValue, 3, cfaRegister, 3, 0x80, 0x01},
			[]byte{cfaExpression, 3, 3, 0x70, 0x78, 0x06},
			[]byte{cfaOffsetExtendedSF, 3, 0x7e, cfaValOffset, 3, 0x81, 0x01, cfaValOffsetSF, 3, 0x7f},
			[]byte{cfaValExpression, 3, 2, 0x77, 0x10},
			[]byte{cfaGNUArgsSize, 0x90, 0x01, cfaGNUNegativeOffsetExtended, 3, 2},
			[]byte{cfaDefCFAOffset, 48}),
			[]cfaProbe{rsp(48).at(0)}},
		{"return address undefined", x86CIE, []byte{cfaAdvanceLoc | 1, cfaUndefined, dwarfRA},
			[]cfaProbe{rsp(8).at(0), noCFA.at(1)}},
		{"return address same_value", x86CIE, []byte{cfaSameValue, dwarfRA}, []cfaProbe{noCFA.at(0)}},
		{"return address in a register", x86CIE, []byte{cfaRegister, dwarfRA, 0}, []cfaProbe{noCFA.at(0)}},
		{"return address expression", x86CIE, []byte{cfaExpression, dwarfRA, 1, 0x9c}, []cfaProbe{noCFA.at(0)}},
		{"return address val_expression", x86CIE, []byte{cfaValExpression, dwarfRA, 1, 0x9c}, []cfaProbe{noCFA.at(0)}},
		{"return address val_offset", x86CIE, []byte{cfaValOffset, dwarfRA, 1}, []cfaProbe{noCFA.at(0)}},
		{"return address val_offset_sf", x86CIE, []byte{cfaValOffsetSF, dwarfRA, 1}, []cfaProbe{noCFA.at(0)}},
		{"return address at CFA-16", x86CIE, []byte{cfaOffsetExtended, dwarfRA, 2}, []cfaProbe{noCFA.at(0)}},
		{"return address at CFA+8", x86CIE, []byte{cfaGNUNegativeOffsetExtended, dwarfRA, 1}, []cfaProbe{noCFA.at(0)}},
		{"return address offset_extended_sf", x86CIE, []byte{cfaUndefined, dwarfRA, cfaOffsetExtendedSF, dwarfRA, 1}, []cfaProbe{rsp(8).at(0)}},
		{"restore of the return address", x86CIE, []byte{cfaUndefined, dwarfRA, cfaAdvanceLoc | 1, cfaRestore | dwarfRA, cfaAdvanceLoc | 1, cfaUndefined, dwarfRA, cfaAdvanceLoc | 1, cfaRestoreExtended, dwarfRA},
			[]cfaProbe{noCFA.at(0), rsp(8).at(1), noCFA.at(2), rsp(8).at(3)}},
		{"other return address register", withCIE(cfiCIE{1, 0x78, 30, nil}, cfaDefCFA, 31, 0, cfaOffset|30, 1), nil, []cfaProbe{noCFA.at(0)}},
		{"CIE without a CFA", withCIE(x86CIE, cfaOffset|dwarfRA, 1), nil, []cfaProbe{noCFA.at(0)}},
		{"CIE without a return address rule", withCIE(x86CIE, cfaDefCFA, dwarfRSP, 8), nil, []cfaProbe{noCFA.at(0)}},
		{"CIE with nops", withCIE(x86CIE, cfaNop, cfaDefCFA, dwarfRSP, 8, cfaOffset|dwarfRA, 1, cfaNop, cfaNop), nil, []cfaProbe{rsp(8).at(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := synthTable(t, tt.cie, tt.prog)
			for _, p := range tt.probes {
				got, ok := tab.lookup(p.pc)
				if ok != p.ok || (ok && got != p.want) {
					t.Errorf("at %#x: got %+v, %v; want %+v, %v", p.pc, got, ok, p.want, p.ok)
				}
			}
		})
	}
}

func TestCFAMalformed(t *testing.T) {
	deep := func(n int) []byte { return bytes.Repeat([]byte{cfaRememberState}, n) }
	tests := []struct {
		name   string
		prog   []byte
		probes []cfaProbe // before and at the problem
	}{
		{"truncated def_cfa", []byte{cfaAdvanceLoc | 1, cfaDefCFA, dwarfRSP}, []cfaProbe{rsp(8).at(0), noCFA.at(1)}},
		{"truncated LEB128", []byte{cfaDefCFAOffset, 0x80}, []cfaProbe{noCFA.at(0)}},
		{"truncated advance_loc4", []byte{cfaAdvanceLoc4, 1, 0}, []cfaProbe{noCFA.at(0)}},
		{"truncated set_loc", []byte{cfaSetLoc, 0, 0x10}, []cfaProbe{noCFA.at(0)}},
		{"truncated expression", []byte{cfaDefCFAExpression, 5, 0x77}, []cfaProbe{noCFA.at(0)}},
		{"expression length overflow", []byte{cfaExpression, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, []cfaProbe{noCFA.at(0)}},
		{"LEB128 too long", cat([]byte{cfaDefCFAOffset}, bytes.Repeat([]byte{0x80}, 20), []byte{0}), []cfaProbe{noCFA.at(0)}},
		{"remember_state at the bound", cat(deep(maxCFIStack), []byte{cfaDefCFAOffset, 16}), []cfaProbe{rsp(16).at(0)}},
		{"remember_state too deep", deep(maxCFIStack + 1), []cfaProbe{noCFA.at(0)}},
		{"absurd remember_state depth", deep(100000), []cfaProbe{noCFA.at(0)}},
		{"restore_state without remember_state", []byte{cfaAdvanceLoc | 1, cfaRestoreState}, []cfaProbe{rsp(8).at(0), noCFA.at(1)}},
		{"unknown opcode 0x17", []byte{0x17}, []cfaProbe{noCFA.at(0)}},
		{"unknown opcode 0x1d (MIPS advance_loc8)", []byte{0x1d, 1, 0, 0, 0, 0, 0, 0, 0}, []cfaProbe{noCFA.at(0)}},
		{"unknown opcode 0x2d (GNU_window_save)", []byte{0x2d}, []cfaProbe{noCFA.at(0)}},
		{"unknown opcode 0x3f", []byte{cfaAdvanceLoc | 2, 0x3f}, []cfaProbe{rsp(8).at(1), noCFA.at(2)}},
		{"def_cfa_offset after an expression", []byte{cfaDefCFAExpression, 0, cfaDefCFAOffset, 8}, []cfaProbe{noCFA.at(0)}},
		{"def_cfa_register after an expression", []byte{cfaDefCFAExpression, 0, cfaDefCFARegister, dwarfRSP}, []cfaProbe{noCFA.at(0)}},
		{"huge register", []byte{cfaDefCFA, 0xff, 0xff, 0xff, 0xff, 0x0f, 8}, []cfaProbe{noCFA.at(0)}},
		{"huge saved register", []byte{cfaOffsetExtended, 0xff, 0xff, 0xff, 0xff, 0x0f, 1}, []cfaProbe{noCFA.at(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := synthTable(t, x86CIE, tt.prog)
			for _, p := range tt.probes {
				got, ok := tab.lookup(p.pc)
				if ok != p.ok || (ok && got != p.want) {
					t.Errorf("at %#x: got %+v, %v; want %+v, %v", p.pc, got, ok, p.want, p.ok)
				}
			}
		})
	}

	t.Run("bad FDE augmentation length", func(t *testing.T) {
		data := synthCFI(x86CIE, []byte{cfaNop})
		data[len(data)-2] = 0x7f // the length, now beyond the FDE
		if tab := newCFATable(data, binary.LittleEndian, 8, ehBases{}); tab != nil {
			t.Errorf("table with %d FDEs, want none", len(tab.fdes))
		}
	})
	t.Run("CIE program overruns", func(t *testing.T) {
		tab := synthTable(t, cfiCIE{1, 0x78, dwarfRA, []byte{cfaDefCFA, dwarfRSP}}, nil)
		if got, ok := tab.lookup(synthLo); ok {
			t.Errorf("got %+v, want no rule", got)
		}
	})
	t.Run("code alignment overflow", func(t *testing.T) {
		c := x86CIE
		c.codeAlign = 0 // one byte cannot overflow; patch in a big factor below
		data := synthCFI(c, []byte{cfaAdvanceLoc | 2})
		// Replace the 1-byte factor by a 10-byte LEB128 of 2^63 and fix
		// up both entry lengths.
		i := bytes.Index(data, []byte("zR\x00")) + 3
		big := append(bytes.Repeat([]byte{0x80}, 9), 0x01)
		data = cat(data[:i], big, data[i+1:])
		binary.LittleEndian.PutUint32(data, binary.LittleEndian.Uint32(data)+9)
		fde := 4 + int(binary.LittleEndian.Uint32(data))
		binary.LittleEndian.PutUint32(data[fde+4:], uint32(fde+4))
		tab := newCFATable(data, binary.LittleEndian, 8, ehBases{})
		if tab == nil {
			t.Fatal("no FDE")
		}
		if got, ok := tab.lookup(synthLo + 0x80); ok {
			t.Errorf("got %+v, want no rule", got)
		}
	})
}

// readelfFDE is one FDE as readelf --debug-dump=frames-interp shows it.
type readelfFDE struct {
	lo, hi uint64
	cie    string       // offset of its CIE
	rows   []readelfRow // sorted by loc; none when the CIE's row holds
}

type readelfRow struct {
	loc uint64
	cfa string // "rsp+8", "rbp+16", "exp", ...
	ra  string // the "ra" column: "c-8", "u", ...; "" without one
	rbp string // the "rbp" column, likewise
}

var (
	readelfEntry = regexp.MustCompile(`^([0-9a-f]{8}) [0-9a-f]+ [0-9a-f]+ (CIE|FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+))`)
	readelfRule  = regexp.MustCompile(`^([a-z][a-z0-9]*)([+-][0-9]+)$`)
)

// readelfFrames runs readelf, the oracle, on path's .eh_frame. An FDE
// whose program has no row of its own gets its CIE's row.
func readelfFrames(t testing.TB, path string) []readelfFDE {
	t.Helper()
	requires(t, "readelf")
	// readelf exits with 1 on some libraries (libc.so.6 of Debian 12)
	// without a word on stderr, yet prints the whole table.
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", path).Output()
	if err != nil && !bytes.Contains(out, []byte("Contents of the .eh_frame section")) {
		t.Fatalf("readelf: %v", err)
	}
	cies := map[string]*[]readelfRow{}
	var fdes []*readelfFDE
	var rows *[]readelfRow
	var cols []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := readelfEntry.FindStringSubmatch(line); m != nil {
			cols = nil
			if m[2] == "CIE" {
				rows = new([]readelfRow)
				cies[m[1]] = rows
				continue
			}
			lo, _ := strconv.ParseUint(m[4], 16, 64)
			hi, _ := strconv.ParseUint(m[5], 16, 64)
			fde := &readelfFDE{lo: lo, hi: hi, cie: m[3]}
			fdes = append(fdes, fde)
			rows = &fde.rows
			continue
		}
		// A register rule is shown as "r9 (r9)": one column.
		var f []string
		for _, w := range strings.Fields(line) {
			if strings.HasPrefix(w, "(") && len(f) > 0 {
				f[len(f)-1] += " " + w
			} else {
				f = append(f, w)
			}
		}
		if len(f) >= 2 && f[0] == "LOC" && f[1] == "CFA" {
			cols = f
			continue
		}
		if rows == nil || cols == nil || len(f) == 0 || len(f[0]) != 16 {
			continue
		}
		if len(f) != len(cols) {
			t.Fatalf("readelf row %q does not match columns %q", line, cols)
		}
		loc, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			t.Fatalf("readelf row %q", line)
		}
		r := readelfRow{loc: loc, cfa: f[1]}
		for i, c := range cols {
			switch c {
			case "ra":
				r.ra = f[i]
			case "rbp":
				r.rbp = f[i]
			}
		}
		*rows = append(*rows, r)
	}
	var res []readelfFDE
	for _, fde := range fdes {
		if len(fde.rows) == 0 {
			cie := cies[fde.cie]
			if cie == nil || len(*cie) != 1 {
				t.Fatalf("readelf: FDE %#x: CIE %s has no single row", fde.lo, fde.cie)
			}
			fde.rows = []readelfRow{{loc: fde.lo, cfa: (*cie)[0].cfa, ra: (*cie)[0].ra, rbp: (*cie)[0].rbp}}
		}
		res = append(res, *fde)
	}
	if len(res) == 0 {
		t.Fatalf("readelf found no FDE in %s", path)
	}
	return res
}

// x86Regs are the DWARF numbers of readelf's register names.
var x86Regs = map[string]int{
	"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7,
	"r8": 8, "r9": 9, "r10": 10, "r11": 11, "r12": 12, "r13": 13, "r14": 14, "r15": 15,
}

// want returns what CFA should answer for a readelf row.
func (r readelfRow) want(t testing.TB) (CFARule, bool) {
	t.Helper()
	if r.ra != "c-8" {
		return CFARule{}, false
	}
	if r.cfa == "exp" {
		return CFARule{}, false
	}
	m := readelfRule.FindStringSubmatch(r.cfa)
	if m == nil {
		t.Fatalf("readelf CFA %q", r.cfa)
	}
	reg, ok := x86Regs[m[1]]
	if !ok {
		t.Fatalf("readelf register %q", m[1])
	}
	off, _ := strconv.ParseInt(m[2], 10, 64)
	return CFARule{Register: reg, Offset: off}, true
}

// rowAt returns the row of fde in effect at pc.
func (fde *readelfFDE) rowAt(pc uint64) readelfRow {
	r := fde.rows[0]
	for _, x := range fde.rows {
		if x.loc <= pc {
			r = x
		}
	}
	return r
}

// offsetsOf maps the vaddrs of path to file offsets, like fileOffset
// without reopening the file for every address.
func offsetsOf(t testing.TB, path string) func(uint64) uint64 {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	var loads []elf.ProgHeader
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			loads = append(loads, p.ProgHeader)
		}
	}
	return func(vaddr uint64) uint64 {
		for _, p := range loads {
			if vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
				return vaddr - p.Vaddr + p.Off
			}
		}
		t.Fatalf("%s: vaddr %#x not in a PT_LOAD", path, vaddr)
		return 0
	}
}

// cfaStats counts the kinds of rule a comparison went through, to check
// that the fixtures cover what they are meant to.
type cfaStats struct {
	checked, rsp, rbp, big, none int
}

// compareCFA checks f.CFA at the addresses of fde chosen by every against
// readelf's rows.
func compareCFA(t *testing.T, f *File, off func(uint64) uint64, fde readelfFDE, pcs []uint64, st *cfaStats) {
	t.Helper()
	for _, pc := range pcs {
		row := fde.rowAt(pc)
		want, wantOK := row.want(t)
		got, ok := f.CFA(off(pc))
		if ok != wantOK || got != want {
			t.Errorf("%s: CFA at %#x (FDE %#x..%#x) = %+v, %v; readelf says CFA %s, ra %q",
				filepath.Base(f.Path()), pc, fde.lo, fde.hi, got, ok, row.cfa, row.ra)
			continue
		}
		st.checked++
		switch {
		case !ok:
			st.none++
		case got.Register == dwarfRSP:
			st.rsp++
			if got.Offset > 4096 {
				st.big++
			}
		case got.Register == dwarfRBP:
			st.rbp++
		}
	}
}

// cfaFixture builds testdata/cfa.c with the given gcc flags.
func cfaFixture(t testing.TB, flags ...string) string {
	requires(t, "gcc")
	name := "cfa" + strings.ReplaceAll(strings.Join(flags, ""), "-", "_")
	argv := append([]string{"gcc"}, flags...)
	argv = append(argv, "-o", "$OUT", srcPath(t, "cfa.c"))
	return build(t, name, argv)
}

// TestCFAMatchesReadelf compares CFA with readelf at every byte of every
// FDE of the C fixture, built four ways, which covers every instruction
// boundary of leaf, big_frame, callee_saved, early_exit and dynamic.
func TestCFAMatchesReadelf(t *testing.T) {
	for _, flags := range [][]string{
		{"-O1"}, {"-O2"},
		{"-O1", "-fno-omit-frame-pointer"}, {"-O2", "-fno-omit-frame-pointer"},
	} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			path := cfaFixture(t, flags...)
			f, off := openWithOffsets(t, path)
			var st cfaStats
			for _, fde := range readelfFrames(t, path) {
				var pcs []uint64
				for pc := fde.lo; pc < fde.hi; pc++ {
					pcs = append(pcs, pc)
				}
				compareCFA(t, f, off, fde, pcs, &st)
			}
			t.Logf("%d addresses: %d rsp-based (%d above rsp+4096), %d rbp-based, %d without a rule",
				st.checked, st.rsp, st.big, st.rbp, st.none)
			// With a frame pointer, big_frame's body is rbp-based.
			if st.rsp == 0 || st.rbp == 0 || st.none == 0 || (len(flags) == 1 && st.big == 0) {
				t.Errorf("fixture does not cover every kind of rule: %+v", st)
			}

			// The leaf never sets up a frame: the recorder's case.
			leaf := nmLookup(t, nm(t, path, false), "leaf")
			for pc := leaf.addr; pc < leaf.addr+leaf.size; pc++ {
				if got, ok := f.CFA(off(pc)); !ok || got != (CFARule{dwarfRSP, 8}) {
					t.Errorf("leaf+%#x: CFA = %+v, %v; want rsp+8", pc-leaf.addr, got, ok)
				}
			}
		})
	}
}

// libcPath returns the C library the test binaries use, or skips.
func libcPath(t testing.TB) string {
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/usr/lib64/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	testutil.Missing(t, "no x86-64 libc.so.6")
	return ""
}

// TestCFAMatchesReadelfLibraries compares CFA with readelf on every FDE
// of libc.so.6 and the other system libraries found, at the first and
// last byte of each row and in its middle. libc has the hand-written
// cases: PLT entries and __restore_rt with expressions, setcontext and
// __longjmp with the CFA in rdx or rdi and the return address in a
// register, clone with an undefined return address.
func TestCFAMatchesReadelfLibraries(t *testing.T) {
	libs := []string{libcPath(t)}
	for _, name := range []string{"libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libz.so.1", "ld-linux-x86-64.so.2"} {
		p := filepath.Join(filepath.Dir(libs[0]), name)
		if _, err := os.Stat(p); err == nil {
			libs = append(libs, p)
		}
	}
	for _, path := range libs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, off := openWithOffsets(t, path)
			var st cfaStats
			for _, fde := range readelfFrames(t, path) {
				var pcs []uint64
				for i, r := range fde.rows {
					end := fde.hi
					if i+1 < len(fde.rows) {
						end = fde.rows[i+1].loc
					}
					if r.loc < end {
						pcs = append(pcs, r.loc, r.loc+(end-r.loc)/2, end-1)
					}
				}
				compareCFA(t, f, off, fde, pcs, &st)
			}
			t.Logf("%d addresses: %d rsp-based (%d above rsp+4096), %d rbp-based, %d without a rule",
				st.checked, st.rsp, st.big, st.rbp, st.none)
			if st.checked < 1000 {
				t.Errorf("only %d addresses checked", st.checked)
			}
		})
	}
}

func TestCFANoUnwindTable(t *testing.T) {
	path := goProg(t, false) // Go binaries have no .eh_frame
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := nmLookup(t, nm(t, path, false), "main.main")
	if got, ok := f.CFA(fileOffset(t, path, s.addr)); ok {
		t.Errorf("CFA in a file without .eh_frame = %+v", got)
	}
	if got, ok := f.CFA(1 << 60); ok {
		t.Errorf("CFA outside every segment = %+v", got)
	}
}

// BenchmarkCFA measures CFA on libc.so.6 at the middle of every FDE, as a
// recorder calls it once per sample.
func BenchmarkCFA(b *testing.B) {
	path := libcPath(b)
	f, err := OpenFileOptions(path, Options{NoDebugFile: true})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	f.CFA(0) // load the table
	offs := []uint64{}
	for _, fde := range f.cfa.fdes {
		offs = append(offs, fde.lo+(fde.hi-fde.lo)/2)
	}
	off := offsetsOf(b, path)
	for i, v := range offs {
		offs[i] = off(v)
	}
	b.ResetTimer()
	n := 0
	for i := 0; b.Loop(); i++ {
		if _, ok := f.CFA(offs[i%len(offs)]); ok {
			n++
		}
	}
	b.ReportMetric(float64(n)/float64(b.N), "ok/op")
}

// BenchmarkCFALongestProgram measures the worst FDE of libc.so.6: the
// longest CFI program, evaluated at its last byte.
func BenchmarkCFALongestProgram(b *testing.B) {
	path := libcPath(b)
	f, err := OpenFileOptions(path, Options{NoDebugFile: true})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	f.CFA(0)
	var worst fdeInfo
	for _, fde := range f.cfa.fdes {
		if fde.end-fde.insn > worst.end-worst.insn {
			worst = fde
		}
	}
	pc := offsetsOf(b, path)(worst.hi - 1)
	b.Logf("FDE %#x..%#x: %d bytes of CFI", worst.lo, worst.hi, worst.end-worst.insn)
	for b.Loop() {
		f.CFA(pc)
	}
}

// FuzzCFA checks that no .eh_frame section or CFI program makes the
// interpreter panic, and that a rule it returns uses the return address
// column it promises. data is a whole .eh_frame (seeded with
// testdata/eh_frame.bin); prog is also run as the program of a synthetic
// FDE at every address of its range.
func FuzzCFA(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "eh_frame.bin")); err == nil {
		f.Add(data, []byte(nil))
	}
	f.Add(synthCFI(x86CIE, nil), []byte{
		cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaOffset | dwarfRBP, 2,
		cfaAdvanceLoc | 3, cfaDefCFARegister, dwarfRBP,
		cfaAdvanceLoc1, 0x40, cfaRememberState, cfaDefCFA, dwarfRSP, 8,
		cfaAdvanceLoc | 1, cfaRestoreState, cfaDefCFAExpression, 1, 0x9c,
		cfaSetLoc, 0x80, 0x10, 0, 0, cfaGNUArgsSize, 8,
	})
	f.Fuzz(func(t *testing.T, data, prog []byte) {
		// The same bytes as .eh_frame and as .debug_frame.
		for _, tab := range []*cfaTable{
			newCFATable(data, binary.LittleEndian, 8, ehBases{section: 0x10000}),
			newCFITable(ehReader{name: ".debug_frame", data: data, order: binary.LittleEndian, ptrSize: 8, debugFrame: true}),
		} {
			if tab == nil {
				continue
			}
			for i, fde := range tab.fdes {
				if i == 64 {
					break
				}
				for _, pc := range []uint64{fde.lo, fde.lo + (fde.hi-fde.lo)/2, fde.hi - 1} {
					tab.lookup(pc)
					if row, err := tab.row(pc); err == nil && len(row.CFA.Expr) > len(data) {
						t.Fatalf("expression of %d bytes from %d bytes of CFI", len(row.CFA.Expr), len(data))
					}
				}
			}
		}
		// The interpreter's LEB128 fast paths agree with ehReader's.
		vm := cfiVM{r: ehReader{data: prog}}
		r := ehReader{data: prog}
		if u, v := vm.uleb(), r.uleb(); u != v || vm.r.off != r.off || (vm.r.err == nil) != (r.err == nil) {
			t.Fatalf("uleb %x: fast %#x at %d, slow %#x at %d", prog, u, vm.r.off, v, r.off)
		}
		vm, r = cfiVM{r: ehReader{data: prog}}, ehReader{data: prog}
		if u, v := vm.sleb(), r.sleb(); u != v || vm.r.off != r.off || (vm.r.err == nil) != (r.err == nil) {
			t.Fatalf("sleb %x: fast %#x at %d, slow %#x at %d", prog, u, vm.r.off, v, r.off)
		}

		tab := newCFATable(synthCFI(x86CIE, prog), binary.LittleEndian, 8, ehBases{section: 0x10000})
		if tab == nil {
			t.Fatal("no synthetic FDE")
		}
		for pc := uint64(synthLo - 1); pc <= synthLo+synthSize; pc++ {
			if r, ok := tab.lookup(pc); ok && (r.Register < 0 || r.Register > cfaMaxRegister) {
				t.Fatalf("register %d", r.Register)
			}
		}
	})
}

func ExampleFile_CFA() {
	f, err := OpenFile("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		return
	}
	defer f.Close()
	var ip, mapStart, pgoff, rsp uint64 // from a sample and its mapping
	if rule, ok := f.CFA(ip - mapStart + pgoff); ok && rule.Register == 7 {
		retAddrSlot := rsp + uint64(rule.Offset) - 8
		fmt.Printf("return address at %#x\n", retAddrSlot)
	}
}

// TestReturnOnTop: only a CFA of %rsp+8 has the return address on top.
func TestReturnOnTop(t *testing.T) {
	for _, tt := range []struct {
		r    CFARule
		want bool
	}{
		{CFARule{Register: dwarfRSP, Offset: 8}, true},
		{CFARule{Register: dwarfRSP, Offset: 16}, false},
		{CFARule{Register: dwarfRBP, Offset: 8}, false},
		{CFARule{}, false},
	} {
		if got := tt.r.ReturnOnTop(); got != tt.want {
			t.Errorf("%+v.ReturnOnTop() = %v", tt.r, got)
		}
	}
}

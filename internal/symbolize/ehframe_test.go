package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// ehBuilder writes .eh_frame entries for tests (little endian, 64-bit).
type ehBuilder struct {
	buf bytes.Buffer
}

// cie writes a CIE with augmentation aug and augmentation data, and
// returns its offset.
func (b *ehBuilder) cie(aug string, augData []byte) int {
	off := b.buf.Len()
	var body bytes.Buffer
	binary.Write(&body, binary.LittleEndian, uint32(0)) // CIE id
	body.WriteByte(1)                                   // version
	body.WriteString(aug)
	body.WriteByte(0)
	body.WriteByte(1)    // code alignment 1
	body.WriteByte(0x78) // data alignment -8
	body.WriteByte(16)   // return address register
	if len(aug) > 0 && aug[0] == 'z' {
		body.WriteByte(byte(len(augData)))
		body.Write(augData)
	}
	b.entry(body.Bytes())
	return off
}

// fde writes an FDE for the CIE at cieOff; loc writes the initial
// location and range given the FDE's offset of the location field.
func (b *ehBuilder) fde(cieOff int, loc func(fieldOff int) []byte) {
	idPos := b.buf.Len() + 4
	var body bytes.Buffer
	binary.Write(&body, binary.LittleEndian, uint32(idPos-cieOff))
	body.Write(loc(idPos + 4))
	body.WriteByte(0) // augmentation data length (for 'z' CIEs)
	b.entry(body.Bytes())
}

func (b *ehBuilder) entry(body []byte) {
	for len(body)%4 != 0 {
		body = append(body, 0) // DW_CFA_nop
	}
	binary.Write(&b.buf, binary.LittleEndian, uint32(len(body)))
	b.buf.Write(body)
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestParseEHFrameEncodings(t *testing.T) {
	const section = 0x10000 // vaddr of the synthetic .eh_frame
	bases := ehBases{section: section, text: 0x400000, data: 0x600000}
	tests := []struct {
		name string
		enc  byte
		loc  func(fieldOff int) []byte // initial location then range
		want fdeRange
	}{
		{"absptr", pePtr, func(int) []byte { return append(le64(0x401000), le64(0x40)...) }, fdeRange{0x401000, 0x401040}},
		{"udata4", peUdata4, func(int) []byte { return append(le32(0x401000), le32(0x10)...) }, fdeRange{0x401000, 0x401010}},
		{"pcrel sdata4", pePCRel | peSdata4, func(off int) []byte {
			rel := int32(0x1000 - (section + off)) // target 0x1000
			return append(le32(uint32(rel)), le32(0x20)...)
		}, fdeRange{0x1000, 0x1020}},
		{"pcrel sdata8", pePCRel | peSdata8, func(off int) []byte {
			rel := int64(0x2000) - int64(section+off)
			return append(le64(uint64(rel)), le64(0x30)...)
		}, fdeRange{0x2000, 0x2030}},
		{"datarel sdata4", peDataRel | peSdata4, func(int) []byte {
			return append(le32(uint32(0xfffff000)), le32(0x8)...) // data - 0x1000
		}, fdeRange{0x5ff000, 0x5ff008}},
		{"textrel udata2", peTextRel | peUdata2, func(int) []byte { return []byte{0x34, 0x12, 0x05, 0x00} }, fdeRange{0x401234, 0x401239}},
		{"uleb128", peULEB128, func(int) []byte { return []byte{0x80, 0x20, 0x10} }, fdeRange{0x1000, 0x1010}},
		{"sleb128", peSLEB128, func(int) []byte { return []byte{0x80, 0x20, 0x10} }, fdeRange{0x1000, 0x1010}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b ehBuilder
			cie := b.cie("zR", []byte{tt.enc})
			b.fde(cie, tt.loc)
			b.buf.Write(le32(0)) // terminator
			got, err := parseEHFrame(b.buf.Bytes(), binary.LittleEndian, 8, bases)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("got %x, want [%x]", got, tt.want)
			}
		})
	}
}

func TestParseEHFrameAugmentations(t *testing.T) {
	var b ehBuilder
	// Personality (indirect pcrel sdata4), LSDA and signal frame before R.
	aug := append([]byte{pePCRel | peSdata4 | peIndirect}, le32(0x1234)...)
	aug = append(aug, pePCRel|peSdata4, peUdata4)
	cie := b.cie("zPLSR", aug)
	b.fde(cie, func(int) []byte { return append(le32(0x5000), le32(0x100)...) })
	// A CIE without augmentation uses absolute pointers.
	plain := b.cie("", nil)
	b.fde(plain, func(int) []byte { return append(append(le64(0x6000), le64(0x10)...), 0, 0, 0) })
	// An FDE of zero length and one at address 0 (discarded code).
	b.fde(cie, func(int) []byte { return append(le32(0x7000), le32(0)...) })
	b.fde(cie, func(int) []byte { return append(le32(0), le32(0x10)...) })
	got, err := parseEHFrame(b.buf.Bytes(), binary.LittleEndian, 8, ehBases{})
	if err != nil {
		t.Fatal(err)
	}
	want := []fdeRange{{0x5000, 0x5100}, {0x6000, 0x6010}}
	if !slices.Equal(got, want) {
		t.Errorf("got %x, want %x", got, want)
	}
}

func TestParseEHFrameErrors(t *testing.T) {
	var good ehBuilder
	cie := good.cie("zR", []byte{peUdata4})
	good.fde(cie, func(int) []byte { return append(le32(0x5000), le32(0x100)...) })
	valid := good.buf.Bytes()
	fdeOff := 4 + int(binary.LittleEndian.Uint32(valid)) // after the CIE
	toFDE := append(slices.Clone(valid), le32(16)...)
	toFDE = append(toFDE, le32(uint32(len(valid)+4-fdeOff))...)
	toFDE = append(toFDE, append(le32(0x6000), le32(0x10)...)...)
	toFDE = append(toFDE, 0, 0, 0, 0)

	tests := []struct {
		name    string
		data    []byte
		wantN   int  // ranges decoded before the error
		wantErr bool // whether an error is reported
	}{
		{"valid without terminator", valid, 1, false},
		{"truncated length", valid[:2], 0, true},
		{"length beyond end", append(slices.Clone(valid), 0xff, 0, 0, 0, 1, 2), 1, true},
		{"CIE pointer before start", append(slices.Clone(valid), append(le32(8), le32(0x1000)...)...), 1, true},
		{"CIE pointer to FDE", toFDE, 1, true},
		{"bad CIE version", func() []byte {
			var b ehBuilder
			c := b.cie("zR", []byte{peUdata4})
			b.buf.Bytes()[8] = 9 // version
			b.fde(c, func(int) []byte { return append(le32(0x5000), le32(0x100)...) })
			return b.buf.Bytes()
		}(), 0, true},
		{"unknown pointer format", func() []byte {
			var b ehBuilder
			c := b.cie("zR", []byte{0x07})
			b.fde(c, func(int) []byte { return append(le32(0x5000), le32(0x100)...) })
			b.fde(cie, func(int) []byte { return nil }) // skipped with its bad CIE
			return b.buf.Bytes()
		}(), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEHFrame(tt.data, binary.LittleEndian, 8, ehBases{})
			if len(got) != tt.wantN {
				t.Errorf("decoded %d ranges, want %d", len(got), tt.wantN)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, want error %v", err, tt.wantErr)
			}
			var de *DecodeError
			if err != nil && (!errors.As(err, &de) || !errors.Is(err, ErrFormat)) {
				t.Errorf("err = %#v, want a *DecodeError wrapping ErrFormat", err)
			}
		})
	}
}

// TestEHFrameMatchesSymbols checks the FDEs of the C fixture against its
// symbol table: every function starts an FDE covering its whole size.
func TestEHFrameMatchesSymbols(t *testing.T) {
	path := cProg(t)
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	fdes, err := ehFrameRanges(ef)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"compute", "helper", "main"} {
		s := nmLookup(t, nm(t, path, false), name)
		if !slices.Contains(fdes, fdeRange{s.addr, s.addr + s.size}) {
			t.Errorf("no FDE [%#x, %#x) for %s", s.addr, s.addr+s.size, name)
		}
	}
	hdr := ef.Section(".eh_frame_hdr")
	data, err := hdr.Data()
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseEHFrameHdr(data, ef.ByteOrder, 8, hdr.Addr)
	if err != nil || got != ef.Section(".eh_frame").Addr {
		t.Errorf("parseEHFrameHdr = %#x, %v; want %#x", got, err, ef.Section(".eh_frame").Addr)
	}
}

// FuzzParseEHFrame checks that no input makes the .eh_frame decoder
// panic or return ranges that are empty. Seeds: testdata/eh_frame.bin
// (see testdata/README.md) and synthetic entries.
func FuzzParseEHFrame(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "eh_frame.bin")); err == nil {
		f.Add(data)
	}
	var b ehBuilder
	cie := b.cie("zPLR", append(append([]byte{pePCRel | peSdata4}, le32(0x10)...), pePCRel|peSdata4, pePCRel|peSdata4))
	b.fde(cie, func(int) []byte { return append(le32(0x5000), le32(0x100)...) })
	f.Add(b.buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		ranges, _ := parseEHFrame(data, binary.LittleEndian, 8, ehBases{section: 0x1000})
		for _, r := range ranges {
			if r.hi <= r.lo {
				t.Fatalf("empty range %x", r)
			}
		}
		parseEHFrameHdr(data, binary.LittleEndian, 8, 0x1000)
		parseEHFrame(data, binary.BigEndian, 4, ehBases{})
	})
}

package symbolize

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DWARF exception-header pointer encodings (DW_EH_PE_*), as used by
// .eh_frame augmentation data and .eh_frame_hdr. See the LSB Core spec,
// "Exception Frames", and the DWARF 4 spec section 7.
const (
	pePtr     = 0x00 // absolute pointer of the target's size
	peULEB128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePCRel   = 0x10
	peTextRel = 0x20
	peDataRel = 0x30
	peFuncRel = 0x40
	peAligned = 0x50

	peIndirect = 0x80
	peOmit     = 0xff
)

// ehBases are the base addresses the relative pointer encodings need.
type ehBases struct {
	section uint64 // vaddr of the first byte of the data being decoded (pcrel)
	text    uint64 // vaddr of .text (textrel)
	data    uint64 // vaddr of the data base: .got for .eh_frame, the header for .eh_frame_hdr
}

// ehReader decodes .eh_frame-style data with a sticky first error, like
// debug/dwarf's buf: after an error every read returns zero.
type ehReader struct {
	name    string
	data    []byte
	off     int
	order   binary.ByteOrder
	ptrSize int
	bases   ehBases
	err     error
	// debugFrame: the data is .debug_frame, whose CIE ids are all ones
	// and whose CIE pointers are section offsets.
	debugFrame bool
}

func (r *ehReader) fail(off int, format string, args ...any) {
	if r.err == nil {
		r.err = &DecodeError{Name: r.name, Offset: int64(off), Err: fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))}
	}
	r.off = len(r.data)
}

func (r *ehReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.data)-r.off {
		r.fail(r.off, "need %d bytes, %d left", n, len(r.data)-r.off)
		return nil
	}
	b := r.data[r.off : r.off+n]
	r.off += n
	return b
}

func (r *ehReader) u8() uint8 {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *ehReader) u16() uint16 {
	if b := r.bytes(2); b != nil {
		return r.order.Uint16(b)
	}
	return 0
}

func (r *ehReader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return r.order.Uint32(b)
	}
	return 0
}

func (r *ehReader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return r.order.Uint64(b)
	}
	return 0
}

func (r *ehReader) uleb() uint64 {
	var v uint64
	var shift uint
	start := r.off
	for r.err == nil {
		b := r.u8()
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			return v
		}
		if shift > 10*7 {
			r.fail(start, "LEB128 too long")
		}
	}
	return 0
}

func (r *ehReader) sleb() int64 {
	var v int64
	var shift uint
	start := r.off
	for r.err == nil {
		b := r.u8()
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
		if shift > 10*7 {
			r.fail(start, "LEB128 too long")
		}
	}
	return 0
}

func (r *ehReader) cstring() string {
	if r.err != nil {
		return ""
	}
	for i := r.off; i < len(r.data); i++ {
		if r.data[i] == 0 {
			s := string(r.data[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail(r.off, "unterminated string")
	return ""
}

// encoded reads a pointer in encoding enc. Indirect pointers are returned
// as the address of the pointer: nothing here needs the target, and
// following it would mean reading other sections.
func (r *ehReader) encoded(enc uint8, funcBase uint64) uint64 {
	if enc == peOmit {
		return 0
	}
	start := r.off
	if enc&0x70 == peAligned {
		pad := (r.ptrSize - r.off%r.ptrSize) % r.ptrSize
		r.bytes(pad)
		start = r.off
	}
	var v uint64
	switch enc & 0x0f {
	case pePtr:
		if r.ptrSize == 4 {
			v = uint64(r.u32())
		} else {
			v = r.u64()
		}
	case peULEB128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peUdata8:
		v = r.u64()
	case peSLEB128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	case peSdata8:
		v = r.u64()
	default:
		r.fail(start, "unknown pointer format %#x", enc)
		return 0
	}
	switch enc & 0x70 {
	case 0, peAligned:
	case pePCRel:
		v += r.bases.section + uint64(start)
	case peTextRel:
		v += r.bases.text
	case peDataRel:
		v += r.bases.data
	case peFuncRel:
		v += funcBase
	default:
		r.fail(start, "unknown pointer application %#x", enc)
		return 0
	}
	if r.ptrSize == 4 {
		v &= 0xffffffff
	}
	return v
}

// fdeRange is the code range [lo, hi) described by one FDE.
type fdeRange struct{ lo, hi uint64 }

// fdeInfo is one FDE as found by walkEHFrame: its code range and where
// its CFI program lies in the section.
type fdeInfo struct {
	lo, hi uint64
	cie    *cieInfo
	// insn and end delimit the FDE's CFI instructions in the section
	// data; insn is -1 when the FDE's augmentation data is malformed.
	insn, end int
}

// cieInfo is what an FDE needs from its CIE.
type cieInfo struct {
	fdeEnc    uint8  // encoding of the FDE's initial location and range
	hasAug    bool   // 'z': FDEs carry an augmentation data length
	codeAlign uint64 // code alignment factor
	dataAlign int64  // data alignment factor
	raReg     uint64 // return address column
	signal    bool   // 'S': the FDEs describe signal trampolines
	insn, end int    // initial instructions: data[insn:end]
	err       error  // the CIE was malformed; FDEs using it are skipped
}

// parseEHFrame returns the function ranges of every FDE in an .eh_frame
// section (data, loaded at bases.section). It stops at the zero terminator
// or at the end of data. On malformed input it returns the ranges it could
// decode and the first error: a malformed CIE only drops its own FDEs, a
// malformed entry length stops the walk.
// FDEs with an empty range (left by the linker for discarded code) are
// skipped.
func parseEHFrame(data []byte, order binary.ByteOrder, ptrSize int, bases ehBases) ([]fdeRange, error) {
	var out []fdeRange
	err := walkEHFrame(data, order, ptrSize, bases, func(fi fdeInfo) {
		out = append(out, fdeRange{lo: fi.lo, hi: fi.hi})
	})
	return out, err
}

// walkEHFrame calls visit for every FDE with a non-empty range in an
// .eh_frame section, as described for parseEHFrame, and returns the first
// error.
func walkEHFrame(data []byte, order binary.ByteOrder, ptrSize int, bases ehBases, visit func(fdeInfo)) error {
	return walkCFI(&ehReader{name: ".eh_frame", data: data, order: order, ptrSize: ptrSize, bases: bases}, visit)
}

// walkCFI is walkEHFrame over r's data, .eh_frame or (r.debugFrame)
// .debug_frame.
func walkCFI(r *ehReader, visit func(fdeInfo)) error {
	data, ptrSize := r.data, r.ptrSize
	if ptrSize != 4 && ptrSize != 8 {
		return &DecodeError{Name: r.name, Err: fmt.Errorf("%w: pointer size %d", ErrFormat, ptrSize)}
	}
	cies := make(map[int]*cieInfo)
	var firstErr error
	for r.off < len(data) && r.err == nil {
		start := r.off
		length := uint64(r.u32())
		if length == 0 {
			break // terminator
		}
		idSize := 4
		if length == 0xffffffff {
			length = r.u64()
			idSize = 8
		}
		if r.err != nil {
			break
		}
		if length > uint64(len(data)-r.off) {
			r.fail(start, "entry length %#x beyond end of section", length)
			break
		}
		end := r.off + int(length)
		idPos := r.off
		var id uint64
		if idSize == 4 {
			id = uint64(r.u32())
		} else {
			id = r.u64()
		}
		if r.err != nil {
			break
		}
		if id == cieID(r.debugFrame, idSize) {
			// A CIE: parsed when an FDE first refers to it.
			r.off = end
			continue
		}
		// The CIE pointer counts back from the CIE pointer field itself
		// in .eh_frame, and is a section offset in .debug_frame.
		var cieOff int
		switch {
		case r.debugFrame && id < uint64(len(data)):
			cieOff = int(id)
		case !r.debugFrame && id <= uint64(idPos):
			cieOff = idPos - int(id)
		default:
			r.fail(idPos, "CIE pointer %#x outside the section", id)
		}
		if r.err != nil {
			break
		}
		cie, ok := cies[cieOff]
		if !ok {
			cie = parseCIE(r, cieOff)
			cies[cieOff] = cie
			if cie.err != nil && firstErr == nil {
				firstErr = cie.err
			}
		}
		if cie.err == nil {
			sub := *r
			sub.data = data[:end]
			sub.off = idPos + idSize
			lo := sub.encoded(cie.fdeEnc, 0)
			// The range is a plain length: only the format part of the
			// encoding applies.
			n := sub.encoded(cie.fdeEnc&0x0f, 0)
			if sub.err != nil {
				r.err = sub.err
				break
			}
			if n > 0 && lo != 0 && lo+n > lo {
				// A bad augmentation length only loses the FDE's CFI
				// program, not its range.
				insn := sub.off
				if cie.hasAug {
					augLen := sub.uleb()
					if sub.err != nil || augLen > uint64(end-sub.off) {
						insn = -1
					} else {
						insn = sub.off + int(augLen)
					}
				}
				visit(fdeInfo{lo: lo, hi: lo + n, cie: cie, insn: insn, end: end})
			}
		}
		r.off = end
	}
	if firstErr == nil || (r.err != nil && errOffset(r.err) < errOffset(firstErr)) {
		firstErr = r.err
	}
	return firstErr
}

func errOffset(err error) int64 {
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Offset
	}
	return 0
}

// validFormat reports whether enc is a pointer encoding an FDE can use.
func validFormat(enc uint8) bool {
	switch enc & 0x0f {
	case pePtr, peULEB128, peUdata2, peUdata4, peUdata8, peSLEB128, peSdata2, peSdata4, peSdata8:
	default:
		return false
	}
	return enc&0x70 <= peAligned && enc&peIndirect == 0
}

// cieID is the CIE id field that marks a CIE: 0 in .eh_frame, all ones
// (of the entry's 4 or 8 bytes) in .debug_frame.
func cieID(debugFrame bool, idSize int) uint64 {
	switch {
	case !debugFrame:
		return 0
	case idSize == 4:
		return 0xffffffff
	}
	return ^uint64(0)
}

var errNotCIE = fmt.Errorf("%w: FDE's CIE pointer does not point to a CIE", ErrFormat)

// parseCIE decodes the CIE at off of r.data. Its errors are kept in the
// result rather than in r, so one bad CIE does not hide the rest.
func parseCIE(parent *ehReader, off int) *cieInfo {
	r := *parent
	r.err = nil
	r.off = off
	length := uint64(r.u32())
	idSize := 4
	if length == 0xffffffff {
		length = r.u64()
		idSize = 8
	}
	if r.err == nil && length > uint64(len(r.data)-r.off) {
		r.fail(off, "CIE length %#x beyond end of section", length)
	}
	if r.err != nil {
		return &cieInfo{err: r.err}
	}
	r.data = r.data[:r.off+int(length)]
	var id uint64
	if idSize == 4 {
		id = uint64(r.u32())
	} else {
		id = r.u64()
	}
	if r.err == nil && id != cieID(r.debugFrame, idSize) {
		return &cieInfo{err: &DecodeError{Name: r.name, Offset: int64(off), Err: errNotCIE}}
	}
	version := r.u8()
	if r.err == nil && version != 1 && version != 3 && version != 4 {
		r.fail(off, "CIE version %d", version)
	}
	aug := r.cstring()
	if version == 4 {
		r.u8() // address_size
		r.u8() // segment_selector_size
	}
	cie := &cieInfo{fdeEnc: pePtr, end: len(r.data)}
	cie.codeAlign = r.uleb()
	cie.dataAlign = r.sleb()
	if version == 1 {
		cie.raReg = uint64(r.u8())
	} else {
		cie.raReg = r.uleb()
	}
	cie.insn = r.off
	if r.err == nil && len(aug) > 0 && aug[0] == 'z' {
		cie.hasAug = true
		augLen := r.uleb()
		if r.err == nil && augLen > uint64(len(r.data)-r.off) {
			r.fail(r.off, "augmentation length %#x beyond end of CIE", augLen)
		}
		augEnd := r.off + int(augLen)
		cie.insn = augEnd
	loop:
		for _, c := range aug[1:] {
			switch c {
			case 'R':
				cie.fdeEnc = r.u8()
			case 'P':
				enc := r.u8()
				// The personality pointer is decoded only to be skipped;
				// its indirect bit does not change its size.
				r.encoded(enc&^peIndirect, 0)
			case 'L':
				r.u8()
			case 'S':
				cie.signal = true
			case 'B', 'G':
				// AArch64 BTI and MTE markers carry no data.
			default:
				// Unknown augmentations are skipped thanks to the length;
				// 'R' comes first in practice, so nothing is lost.
				break loop
			}
		}
		if r.err == nil && r.off > augEnd {
			r.fail(off, "augmentation data overruns its length")
		}
		if r.err == nil && !validFormat(cie.fdeEnc) {
			r.fail(off, "unknown FDE pointer encoding %#x", cie.fdeEnc)
		}
	} else if aug != "" {
		// Without 'z' the layout of unknown augmentations ("eh" from
		// very old GCC) cannot be skipped safely.
		r.fail(off, "unsupported CIE augmentation %q", aug)
	}
	cie.err = r.err
	return cie
}

// parseEHFrameHdr decodes an .eh_frame_hdr section loaded at hdrAddr and
// returns the vaddr of the .eh_frame section it describes. It lets a file
// without section headers still find its unwind tables through the
// PT_GNU_EH_FRAME program header.
func parseEHFrameHdr(data []byte, order binary.ByteOrder, ptrSize int, hdrAddr uint64) (ehFrame uint64, err error) {
	r := &ehReader{name: ".eh_frame_hdr", data: data, order: order, ptrSize: ptrSize,
		bases: ehBases{section: hdrAddr, data: hdrAddr}}
	version := r.u8()
	ptrEnc := r.u8()
	r.u8() // fde_count_enc
	r.u8() // table_enc
	if r.err == nil && version != 1 {
		r.fail(0, "version %d", version)
	}
	if r.err == nil && ptrEnc == peOmit {
		r.fail(1, "no eh_frame_ptr")
	}
	ehFrame = r.encoded(ptrEnc, 0)
	return ehFrame, r.err
}

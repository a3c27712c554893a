package symbolize

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrUnsupported is wrapped by EvalExpr and UnwindRow for valid DWARF
// that trueprof does not evaluate (an operation outside the subset real
// unwind tables use, a rule on a return address column other than 16).
var ErrUnsupported = errors.New("unsupported")

// ErrNoCFI is returned by UnwindRow for an address no FDE covers.
var ErrNoCFI = errors.New("no call frame information")

// Expression limits: real CFI expressions (glibc's signal frames, the
// PLT) run fewer than 10 operations on a stack of at most 3 entries, so
// anything beyond these is malformed or hostile input.
const (
	maxExprOps   = 64
	maxExprStack = 16
)

// DWARF expression operations (DWARF 5 section 7.7.1) that EvalExpr runs.
const (
	opAddr       = 0x03
	opDeref      = 0x06
	opConst1u    = 0x08
	opConst1s    = 0x09
	opConst2u    = 0x0a
	opConst2s    = 0x0b
	opConst4u    = 0x0c
	opConst4s    = 0x0d
	opConst8u    = 0x0e
	opConst8s    = 0x0f
	opConstu     = 0x10
	opConsts     = 0x11
	opDup        = 0x12
	opDrop       = 0x13
	opOver       = 0x14
	opSwap       = 0x16
	opAnd        = 0x1a
	opMinus      = 0x1c
	opMul        = 0x1e
	opNeg        = 0x1f
	opNot        = 0x20
	opOr         = 0x21
	opPlus       = 0x22
	opPlusUconst = 0x23
	opShl        = 0x24
	opShr        = 0x25
	opShra       = 0x26
	opXor        = 0x27
	opBra        = 0x28
	opEq         = 0x29
	opGe         = 0x2a
	opGt         = 0x2b
	opLe         = 0x2c
	opLt         = 0x2d
	opNe         = 0x2e
	opSkip       = 0x2f
	opLit0       = 0x30
	opLit31      = 0x4f
	opBreg0      = 0x70
	opBreg31     = 0x8f
	opBregx      = 0x92
	opNop        = 0x96
)

// EvalExpr evaluates a DWARF location expression as CFI uses it (x86-64,
// 8-byte addresses) and returns the value on top of the stack at its end.
// initial, when not nil, is pushed first (the CFA, for DW_CFA_expression
// register rules). reg returns the value of a DWARF register and mem an
// 8-byte read; either returning false makes the evaluation fail.
// Operations outside the subset unwind tables use give ErrUnsupported;
// more than 64 executed operations or 16 stack entries give ErrFormat.
func EvalExpr(expr []byte, initial *uint64, reg func(int) (uint64, bool), mem func(uint64) (uint64, bool)) (uint64, error) {
	var st [maxExprStack]uint64
	n := 0
	push := func(v uint64) error {
		if n == len(st) {
			return fmt.Errorf("%w: expression stack overflow", ErrFormat)
		}
		st[n] = v
		n++
		return nil
	}
	if initial != nil {
		st[0], n = *initial, 1
	}
	r := ehReader{name: "expression", data: expr, order: binary.LittleEndian, ptrSize: 8}
	for ops := 0; r.off < len(expr); ops++ {
		if ops == maxExprOps {
			return 0, fmt.Errorf("%w: more than %d expression operations", ErrFormat, maxExprOps)
		}
		pos := r.off
		op := r.u8()
		need := 0 // operands the operation pops
		switch op {
		case opDeref, opNeg, opNot, opPlusUconst, opDup, opDrop, opBra:
			need = 1
		case opOver, opSwap, opAnd, opMinus, opMul, opOr, opPlus, opShl, opShr, opShra, opXor,
			opEq, opGe, opGt, opLe, opLt, opNe:
			need = 2
		}
		if n < need {
			return 0, fmt.Errorf("%w: expression stack underflow at operation %#x (offset %d)", ErrFormat, op, pos)
		}
		var v uint64
		pushes := true
		switch {
		case op >= opLit0 && op <= opLit31:
			v = uint64(op - opLit0)
		case op >= opBreg0 && op <= opBreg31, op == opBregx:
			rn := int(op - opBreg0)
			if op == opBregx {
				rn = int(min(r.uleb(), 1<<16))
			}
			off := r.sleb()
			base, ok := reg(rn)
			if !ok {
				return 0, fmt.Errorf("%w: register %d in an expression", ErrUnsupported, rn)
			}
			v = base + uint64(off)
		default:
			switch op {
			case opAddr, opConst8u, opConst8s:
				v = r.u64()
			case opConst1u:
				v = uint64(r.u8())
			case opConst1s:
				v = uint64(int64(int8(r.u8())))
			case opConst2u:
				v = uint64(r.u16())
			case opConst2s:
				v = uint64(int64(int16(r.u16())))
			case opConst4u:
				v = uint64(r.u32())
			case opConst4s:
				v = uint64(int64(int32(r.u32())))
			case opConstu:
				v = r.uleb()
			case opConsts:
				v = uint64(r.sleb())
			case opDup:
				v = st[n-1]
			case opOver:
				v = st[n-2]
			case opDrop:
				n--
				pushes = false
			case opSwap:
				st[n-1], st[n-2] = st[n-2], st[n-1]
				pushes = false
			case opDeref:
				m, ok := mem(st[n-1])
				if !ok {
					return 0, fmt.Errorf("%w: expression reads %#x, outside the stack copy", ErrFormat, st[n-1])
				}
				st[n-1] = m
				pushes = false
			case opNeg:
				st[n-1] = -st[n-1]
				pushes = false
			case opNot:
				st[n-1] = ^st[n-1]
				pushes = false
			case opPlusUconst:
				st[n-1] += r.uleb()
				pushes = false
			case opSkip, opBra:
				off := int(int16(r.u16()))
				pushes = false
				if op == opBra {
					n--
					if st[n] == 0 {
						break
					}
				}
				to := r.off + off
				if to < 0 || to > len(expr) {
					return 0, fmt.Errorf("%w: branch to %d outside the expression", ErrFormat, to)
				}
				r.off = to
			case opNop:
				pushes = false
			case opAnd, opMinus, opMul, opOr, opPlus, opShl, opShr, opShra, opXor,
				opEq, opGe, opGt, opLe, opLt, opNe:
				a, b := st[n-2], st[n-1] // b was pushed last
				n -= 2
				v = binaryOp(op, a, b)
			default:
				return 0, fmt.Errorf("%w: expression operation %#x", ErrUnsupported, op)
			}
		}
		if r.err != nil {
			return 0, r.err
		}
		if pushes {
			if err := push(v); err != nil {
				return 0, err
			}
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: expression leaves an empty stack", ErrFormat)
	}
	return st[n-1], nil
}

// binaryOp applies a two-operand operation: a is the second entry of the
// stack, b the top. Comparisons are signed, as DWARF specifies for the
// generic type.
func binaryOp(op byte, a, b uint64) uint64 {
	flag := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case opAnd:
		return a & b
	case opMinus:
		return a - b
	case opMul:
		return a * b
	case opOr:
		return a | b
	case opPlus:
		return a + b
	case opShl:
		if b >= 64 {
			return 0
		}
		return a << b
	case opShr:
		if b >= 64 {
			return 0
		}
		return a >> b
	case opShra:
		return uint64(int64(a) >> min(b, 63))
	case opXor:
		return a ^ b
	case opEq:
		return flag(a == b)
	case opGe:
		return flag(int64(a) >= int64(b))
	case opGt:
		return flag(int64(a) > int64(b))
	case opLe:
		return flag(int64(a) <= int64(b))
	case opLt:
		return flag(int64(a) < int64(b))
	default: // opNe
		return flag(a != b)
	}
}

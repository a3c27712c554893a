package symbolize

import (
	"errors"
	"testing"
)

// pltExpr is the CFA expression GCC/binutils give a lazy-binding .plt
// section: rsp+8, plus 8 more once rip is at or past offset 11 of its
// 16-byte entry (after the push of the relocation index).
var pltExpr = []byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}

func TestEvalExpr(t *testing.T) {
	const sp, bp = 0x7000, 0x7100
	regs := func(rip uint64) func(int) (uint64, bool) {
		return func(n int) (uint64, bool) {
			switch n {
			case dwarfRSP:
				return sp, true
			case dwarfRBP:
				return bp, true
			case dwarfRA:
				return rip, true
			}
			return 0, false
		}
	}
	mem := func(a uint64) (uint64, bool) {
		if a >= sp && a < sp+0x200 {
			return a*2 + 1, true
		}
		return 0, false
	}
	for off := uint64(0); off < 16; off++ {
		want := uint64(sp + 8)
		if off >= 11 {
			want += 8
		}
		got, err := EvalExpr(pltExpr, nil, regs(0x1020+off), mem)
		if err != nil || got != want {
			t.Errorf("PLT at +%d: %#x, %v; want %#x", off, got, err, want)
		}
	}
	loop := []byte{0x30, 0x28, 0xfd, 0xff} // lit0; bra -3: not taken, and the stack is left empty
	spin := []byte{0x31, 0x2f, 0xfd, 0xff} // lit1; skip -3 (back to lit1): runs forever
	cfa := uint64(0x9000)
	tests := []struct {
		name    string
		expr    []byte
		initial *uint64
		want    uint64
		err     error
	}{
		{"signal frame CFA: breg7 160; deref", []byte{0x77, 0xa0, 0x01, 0x06}, nil, (sp+160)*2 + 1, nil},
		{"DRAP: breg6 -8; deref", []byte{0x76, 0x78, 0x06}, nil, (bp-8)*2 + 1, nil},
		{"register rule: CFA pushed first", []byte{0x23, 0x10}, &cfa, 0x9010, nil},
		{"constants and arithmetic", []byte{0x08, 200, 0x09, 0xfe, 0x22, 0x11, 0x7f, 0x1e}, nil, ^uint64(197) /* -198 */, nil},
		{"bra not taken", loop, nil, 0, errFormatEmpty},
		{"bra taken skips", []byte{0x31, 0x28, 0x01, 0x00, 0x3f, 0x35}, nil, 5, nil},
		{"swap over drop", []byte{0x31, 0x32, 0x16, 0x14, 0x13, 0x1c}, nil, 1, nil},
		{"comparisons are signed", []byte{0x11, 0x7f, 0x30, 0x2d}, nil, 1, nil},
		{"shr by 64 is 0", []byte{0x11, 0x7f, 0x08, 64, 0x25}, nil, 0, nil},
		{"unsupported op (DW_OP_call_frame_cfa)", []byte{0x9c}, nil, 0, ErrUnsupported},
		{"unknown register", []byte{0x75, 0}, nil, 0, ErrUnsupported},
		{"read outside the stack", []byte{0x30, 0x06}, nil, 0, ErrFormat},
		{"65 operations", spin, nil, 0, ErrFormat},
		{"stack overflow", []byte{0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30}, nil, 0, ErrFormat},
		{"underflow", []byte{0x22}, nil, 0, ErrFormat},
		{"truncated operand", []byte{0x0c, 1, 2}, nil, 0, ErrFormat},
		{"branch outside", []byte{0x2f, 0x00, 0x10}, nil, 0, ErrFormat},
		{"empty", nil, nil, 0, ErrFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EvalExpr(tt.expr, tt.initial, regs(0), mem)
			want := tt.err
			if want == errFormatEmpty {
				want = ErrFormat
			}
			if want != nil {
				if !errors.Is(err, want) {
					t.Errorf("got %#x, %v; want an error wrapping %v", got, err, want)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %#x, %v; want %#x", got, err, tt.want)
			}
		})
	}
}

// errFormatEmpty marks a case that ends with an empty stack.
var errFormatEmpty = errors.New("empty stack")

// FuzzEvalExpr checks that no expression panics or runs unbounded.
func FuzzEvalExpr(f *testing.F) {
	f.Add(pltExpr)
	f.Add([]byte{0x77, 0xa0, 0x01, 0x06})
	f.Add([]byte{0x31, 0x2f, 0xfd, 0xff})
	f.Fuzz(func(t *testing.T, expr []byte) {
		calls := 0
		reg := func(n int) (uint64, bool) { calls++; return uint64(n) << 12, n < 17 }
		mem := func(a uint64) (uint64, bool) { calls++; return a ^ 0x5555, a&7 == 0 }
		init := uint64(0x1000)
		if _, err := EvalExpr(expr, &init, reg, mem); err == nil && len(expr) == 0 {
			// The initial value alone is a valid result.
			return
		}
		if calls > maxExprOps {
			t.Fatalf("%d register or memory reads for %d operations at most", calls, maxExprOps)
		}
	})
}

package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// KernelModule is the module name of symbols of the kernel image itself.
const KernelModule = "[kernel.kallsyms]"

// Kallsyms resolves kernel addresses with the symbols of /proc/kallsyms.
// It is immutable after LoadKallsyms and safe for concurrent use.
type Kallsyms struct {
	syms []ksym // sorted by addr, one per address
}

type ksym struct {
	addr   uint64
	name   string
	module string
	text   bool
	global bool // upper-case type letter
}

// LoadKallsyms reads symbols in the /proc/kallsyms format ("ADDR TYPE NAME
// [MODULE]", hex address). Every symbol bounds the one before it, but only
// text symbols (types t, T, w, W) name code. It returns
// ErrNoKernelAddresses if every address is zero (kptr_restrict), and a
// *DecodeError whose Offset is the 1-based line number for a malformed
// line.
func LoadKallsyms(r io.Reader) (*Kallsyms, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	modules := map[string]string{"": KernelModule}
	var syms []ksym
	nonZero := false
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 3 || len(fields[1]) != 1 {
			return nil, &DecodeError{Name: "kallsyms", Offset: int64(line), Err: fmt.Errorf("%w: %q", ErrFormat, text)}
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			return nil, &DecodeError{Name: "kallsyms", Offset: int64(line), Err: fmt.Errorf("%w: address %q", ErrFormat, fields[0])}
		}
		mod := ""
		if len(fields) >= 4 {
			mod = fields[3]
		}
		m, ok := modules[mod]
		if !ok {
			// Intern: a module has thousands of symbols.
			m = mod
			if !strings.HasPrefix(m, "[") {
				m = "[" + m + "]"
			}
			modules[mod] = m
		}
		if addr != 0 {
			nonZero = true
		}
		typ := fields[1][0]
		syms = append(syms, ksym{
			addr:   addr,
			name:   fields[2],
			module: m,
			text:   typ == 't' || typ == 'T' || typ == 'w' || typ == 'W',
			global: typ >= 'A' && typ <= 'Z',
		})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(syms) > 0 && !nonZero {
		return nil, ErrNoKernelAddresses
	}
	// One symbol per address: text first, then (as for ELF aliases) the
	// global one, the shortest name, the smallest name.
	slices.SortFunc(syms, func(a, b ksym) int {
		if a.addr != b.addr {
			if a.addr < b.addr {
				return -1
			}
			return 1
		}
		if a.text != b.text {
			if a.text {
				return -1
			}
			return 1
		}
		if a.global != b.global {
			if a.global {
				return -1
			}
			return 1
		}
		if len(a.name) != len(b.name) {
			return len(a.name) - len(b.name)
		}
		return strings.Compare(a.name, b.name)
	})
	syms = slices.CompactFunc(syms, func(a, b ksym) bool { return a.addr == b.addr })
	return &Kallsyms{syms: slices.Clip(syms)}, nil
}

// Len returns the number of distinct symbol addresses.
func (k *Kallsyms) Len() int { return len(k.syms) }

// Resolve returns the text symbol containing addr and its module, which is
// KernelModule for the kernel image and "[NAME]" for a module. A symbol
// extends to the next symbol of the same module. kallsyms has no sizes,
// so a symbol followed by another module's (or by none, like the
// ftrace trampolines at the end) extends only to the end of its 4 KiB
// page: the gap after a module is not its last function. Addresses in
// data or outside every symbol are not resolved (ok false).
func (k *Kallsyms) Resolve(addr uint64) (function, module string, ok bool) {
	i := sort.Search(len(k.syms), func(i int) bool { return k.syms[i].addr > addr }) - 1
	if i < 0 || !k.syms[i].text {
		return "", "", false
	}
	s := &k.syms[i]
	if i+1 == len(k.syms) || k.syms[i+1].module != s.module {
		const page = 4096
		if addr/page != s.addr/page {
			return "", "", false
		}
	}
	return s.name, s.module, true
}

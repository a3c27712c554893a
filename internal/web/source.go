package web

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/symbolize"
)

// Errors of the source and disassembly look-ups; the server answers 404
// for both, 403 for ErrForbidden.
var (
	// ErrForbidden: the file is not one the trace's locations name, or
	// its name climbs out of a directory ("..").
	ErrForbidden = errors.New("file not named by the trace")
	// ErrUnavailable: the file is missing, not a regular file, too large
	// or unreadable, or the function has no code to disassemble.
	ErrUnavailable = errors.New("not available")
)

// maxSourceBytes bounds a source file read for the page.
const maxSourceBytes = 4 << 20

// readSource returns the contents of file, which must be in allowed (the
// files the trace names) and a regular file of at most maxSourceBytes.
func readSource(allowed map[string]bool, file string) (string, error) {
	if !allowed[file] || !safePath(file) {
		return "", fmt.Errorf("%w: %q", ErrForbidden, file)
	}
	f, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > maxSourceBytes {
		return "", fmt.Errorf("%w: %s is not a regular file of at most %d bytes", ErrUnavailable, file, maxSourceBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSourceBytes))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return string(b), nil
}

// safePath rejects names with a ".." element or a NUL: even a name the
// trace gives must not climb out of where it says it is (a trace is
// untrusted input).
func safePath(name string) bool {
	if name == "" || strings.ContainsRune(name, 0) {
		return false
	}
	return !slices.Contains(strings.Split(filepath.ToSlash(name), "/"), "..")
}

// Disassembly is the machine code of one function, for functions whose
// source file is not available.
type Disassembly struct {
	Module string `json:"module"`
	Symbol string `json:"symbol"`
	// Insns are the instructions in address order.
	Insns []Insn `json:"insns"`
}

// Insn is one instruction: its address (ELF virtual address), Intel
// syntax text, and the samples whose leaf was at it.
type Insn struct {
	Addr    uint64 `json:"addr"`
	Text    string `json:"text"`
	Samples uint64 `json:"samples"`
}

// maxInsns bounds one function's disassembly.
const maxInsns = 20000

// disassembler disassembles functions of one profile. It opens each
// module once, reads its symbols once and counts the leaf samples once,
// however many functions it is asked for (the HTML file asks for up to
// HTMLOptions.MaxDisasm). Close releases the modules.
type disassembler struct {
	p *model.Profile
	d *Data
	// offsets are, per module and physical function name, the file
	// offsets of the locations whose outermost frame it is.
	offsets map[[2]string][]uint64
	// samples are, per module, the leaf samples per file offset.
	samples map[string]map[uint64]uint64
	mods    map[string]*elfModule
}

// elfModule is an opened module, or why it cannot be disassembled.
type elfModule struct {
	f   *symbolize.File
	err error
}

func newDisassembler(p *model.Profile, d *Data) *disassembler {
	x := &disassembler{p: p, d: d, offsets: map[[2]string][]uint64{}, samples: map[string]map[uint64]uint64{}, mods: map[string]*elfModule{}}
	for i := 1; i < len(p.Locations); i++ {
		l := &p.Locations[i]
		if len(l.Frames) > 0 {
			k := [2]string{l.Module, l.Frames[len(l.Frames)-1].Function}
			x.offsets[k] = append(x.offsets[k], l.Offset)
		}
	}
	for loc, n := range d.leaves {
		if _, m := calltree.Frames(p, loc); m != "" {
			if x.samples[m] == nil {
				x.samples[m] = map[uint64]uint64{}
			}
			x.samples[m][p.Locations[loc].Offset] += n
		}
	}
	return x
}

// Close closes the modules opened.
func (x *disassembler) Close() {
	for _, m := range x.mods {
		if m.f != nil {
			m.f.Close()
		}
	}
}

// module opens an x86-64 module, once.
func (x *disassembler) module(path string) (*elfModule, error) {
	if m, ok := x.mods[path]; ok {
		return m, m.err
	}
	m := &elfModule{}
	x.mods[path] = m
	st, err := os.Stat(path)
	switch {
	case err != nil || !st.Mode().IsRegular():
		m.err = fmt.Errorf("%w: module %s", ErrUnavailable, path)
	default:
		if m.f, err = symbolize.OpenFile(path); err != nil {
			m.err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		} else if m.f.Machine() != elf.EM_X86_64 {
			m.err = fmt.Errorf("%w: %s is not x86-64", ErrUnavailable, path)
		}
	}
	return m, m.err
}

// disassemble decodes function fn (an index in d.Funcs) from its
// module's ELF file. The function is found by the symbol that contains
// one of its locations, so only code the trace points at is read.
func (x *disassembler) disassemble(fn int) (*Disassembly, error) {
	d := x.d
	if fn < 0 || fn >= len(d.Funcs.Name) {
		return nil, fmt.Errorf("%w: no function %d", ErrUnavailable, fn)
	}
	name, module := d.Funcs.Name[fn], d.Modules[d.Funcs.Module[fn]]
	if x.p.Aggregation.Granularity == model.Files {
		return nil, fmt.Errorf("%w: %s is a file, not one function's machine code", ErrUnavailable, name)
	}
	if !filepath.IsAbs(module) || !safePath(module) {
		return nil, fmt.Errorf("%w: module %q is not a file", ErrUnavailable, module)
	}
	offsets := x.offsets[[2]string{module, name}]
	if len(offsets) == 0 {
		return nil, fmt.Errorf("%w: %s has no machine code location in the trace", ErrUnavailable, name)
	}
	m, err := x.module(module)
	if err != nil {
		return nil, err
	}
	f := m.f
	vaddr, ok := f.VAddr(offsets[0])
	sym, found := f.FunctionAt(vaddr)
	if !ok || !found || sym.Size == 0 {
		return nil, fmt.Errorf("%w: no symbol covers %s in %s", ErrUnavailable, name, module)
	}
	code, err := f.Code(sym.Addr, min(sym.Size, maxCodeBytes))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	base := sym.Addr
	samples := x.samples[module]
	out := &Disassembly{Module: module, Symbol: sym.Name, Insns: []Insn{}}
	for pc := 0; pc < len(code) && len(out.Insns) < maxInsns; {
		addr := base + uint64(pc)
		inst, err := x86asm.Decode(code[pc:], 64)
		text := ""
		size := inst.Len
		if err != nil || size == 0 {
			text, size = fmt.Sprintf(".byte %#x", code[pc]), 1
		} else {
			text = x86asm.IntelSyntax(inst, addr, nil)
		}
		var n uint64
		if off, ok := f.FileOffset(addr); ok {
			n = samples[off]
		}
		out.Insns = append(out.Insns, Insn{Addr: addr, Text: text, Samples: n})
		pc += size
	}
	return out, nil
}

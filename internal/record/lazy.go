package record

import (
	"debug/elf"
	"sort"

	"golang.org/x/arch/x86/x86asm"

	"trueprof/internal/symbolize"
)

// callGraph finds the direct callees of a module's functions, for --root
// (Scheme B): when a probed function first runs, the functions
// it calls directly are probed in turn, so only the root's subgraph pays
// for probes.
type callGraph struct {
	f     *elf.File
	funcs []elfFunc // sorted by address
}

type elfFunc struct {
	name       string
	addr, size uint64
}

func openCallGraph(path string) (*callGraph, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	syms, err := f.Symbols()
	if err != nil || len(syms) == 0 {
		syms, _ = f.DynamicSymbols()
	}
	g := &callGraph{f: f}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Size > 0 {
			g.funcs = append(g.funcs, elfFunc{name: symbolize.Demangle(s.Name), addr: s.Value, size: s.Size})
		}
	}
	sort.Slice(g.funcs, func(i, j int) bool { return g.funcs[i].addr < g.funcs[j].addr })
	return g, nil
}

func (g *callGraph) close() error { return g.f.Close() }

// function returns the function starting at vaddr.
func (g *callGraph) function(vaddr uint64) (elfFunc, bool) {
	i := sort.Search(len(g.funcs), func(i int) bool { return g.funcs[i].addr >= vaddr })
	if i < len(g.funcs) && g.funcs[i].addr == vaddr {
		return g.funcs[i], true
	}
	return elfFunc{}, false
}

// callees returns the names of the functions of this module that the
// function at vaddr calls directly (CALL rel32 and tail-call JMPs to a
// function's start). Calls through the PLT or a register are not
// followed: their targets are in other modules or unknown until run.
func (g *callGraph) callees(vaddr uint64) []string {
	fn, ok := g.function(vaddr)
	if !ok {
		return nil
	}
	code := make([]byte, fn.size)
	var prog *elf.Prog
	for _, p := range g.f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && fn.addr >= p.Vaddr && fn.addr+fn.size <= p.Vaddr+p.Filesz {
			prog = p
		}
	}
	if prog == nil {
		return nil
	}
	if _, err := prog.ReadAt(code, int64(fn.addr-prog.Vaddr)); err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for off := 0; off < len(code); {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			off++
			continue
		}
		pc := fn.addr + uint64(off) + uint64(inst.Len)
		off += inst.Len
		if inst.Op != x86asm.CALL && inst.Op != x86asm.JMP {
			continue
		}
		rel, ok := inst.Args[0].(x86asm.Rel)
		if !ok {
			continue
		}
		target := uint64(int64(pc) + int64(rel))
		callee, ok := g.function(target)
		if !ok || callee.addr == fn.addr || seen[callee.name] {
			continue
		}
		seen[callee.name] = true
		out = append(out, callee.name)
	}
	return out
}

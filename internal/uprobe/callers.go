package uprobe

import (
	"debug/elf"
	"encoding/binary"
	"slices"

	"golang.org/x/arch/x86/x86asm"

	"trueprof/internal/symbolize"
)

// CallSite is one direct call of a function probed at its callers
// (Site.Calls): the call instruction, a relative call the kernel
// emulates, holds the entry probe, and the instruction the call returns
// to holds the exit probe, one the kernel emulates too. A call followed
// only by its caller's epilogue (pop, leave, ret) has no exit probe of
// its own: the caller's exit ends it (WithCaller), a few instructions
// later.
type CallSite struct {
	Call       uint64 // file offset of the call instruction
	Return     uint64 // file offset of the instruction it returns to; 0 with WithCaller
	WithCaller bool
}

// callIndex is what probing functions at their callers needs to know of
// a module's code: every direct call by the address it calls, and every
// address the code or data names otherwise (a jump from another
// function, an instruction operand, a word of data, a relocation, an
// exported symbol), which may reach a function without a call the
// index knows.
type callIndex struct {
	calls map[uint64][]callRef
	named map[uint64]bool
	// safe holds the functions no exception can pass through: they
	// call only functions of the module that are safe too (nothrow).
	safe map[uint64]bool
	// complete says that every function of the module decoded: a call
	// in code the sweep could not read would be an entry never seen.
	complete bool
}

// caller is one decoded function of the module.
type caller struct {
	fn  symbolize.Function
	ins []insn
	// callees are the functions fn calls or jumps to directly, and
	// opaque says that it also calls or leaves by an indirect branch.
	callees []uint64
	opaque  bool
	// landing holds the offsets direct branches of fn land on, and
	// indirect whether fn jumps indirectly (a jump table may land
	// anywhere in it).
	landing  map[int]bool
	indirect bool
}

// callRef is a direct call: the k-th instruction of its caller.
type callRef struct {
	caller *caller
	k      int
}

// indexCalls decodes every function of f, the file at path, and the
// words of its data sections and relocations.
func indexCalls(f *symbolize.File, path string) *callIndex {
	idx := &callIndex{calls: map[uint64][]callRef{}, named: map[uint64]bool{}, safe: map[uint64]bool{}, complete: true}
	funcs := map[uint64]bool{}
	var all []*caller
	for _, fn := range f.Functions() {
		if funcs[fn.Addr] {
			continue
		}
		funcs[fn.Addr] = true
		code, err := f.Code(fn.Addr, fn.Size)
		if err != nil {
			continue // no code to call: an alias of data or an absolute symbol
		}
		ins, err := decodeFunc(code)
		if err != nil {
			idx.complete = false
			continue
		}
		all = append(all, &caller{fn: fn, ins: ins, landing: map[int]bool{}})
	}
	name := func(addr uint64) {
		if funcs[addr] {
			idx.named[addr] = true
		}
	}
	for _, c := range all {
		for k, in := range c.ins {
			inside := in.direct && in.target >= 0 && uint64(in.target) < c.fn.Size
			switch {
			case in.op == x86asm.CALL && in.direct:
				idx.calls[c.fn.Addr+uint64(in.target)] = append(idx.calls[c.fn.Addr+uint64(in.target)], callRef{c, k})
				c.callees = append(c.callees, c.fn.Addr+uint64(in.target))
			case in.direct && inside:
				c.landing[in.target] = true
			case in.direct:
				name(c.fn.Addr + uint64(in.target)) // a jump into another function: a tail call
				c.callees = append(c.callees, c.fn.Addr+uint64(in.target))
			case in.op == x86asm.JMP:
				c.indirect, c.opaque = true, true
			case in.op == x86asm.CALL:
				c.opaque = true
			}
			switch {
			case in.refRIP:
				name(c.fn.Addr + uint64(in.ref))
			case in.refImm && in.ref > 0:
				name(uint64(in.ref))
			}
		}
	}
	if !nameData(path, name) {
		idx.complete = false
	}
	idx.findSafe(all)
	return idx
}

// findSafe fills idx.safe: the functions of all that branch to nothing
// but functions of all that are safe too, by elimination from all those
// without indirect branches (recursion among safe functions stays safe).
// A call to anything else (a PLT stub: __cxa_throw, a library) may throw.
func (idx *callIndex) findSafe(all []*caller) {
	for _, c := range all {
		if !c.opaque {
			idx.safe[c.fn.Addr] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, c := range all {
			if idx.safe[c.fn.Addr] && slices.ContainsFunc(c.callees, func(g uint64) bool { return !idx.safe[g] }) {
				delete(idx.safe, c.fn.Addr)
				changed = true
			}
		}
	}
}

// nothrow reports whether no C++ exception can pass through the
// function at addr (findSafe), so that a return probe may replace its
// return address.
func (idx *callIndex) nothrow(addr uint64) bool { return idx.safe[addr] }

// nameData calls name with every aligned 8-byte word of the allocated
// data sections of the ELF file at path, every relocation's addend and
// every symbol it exports, the ways data can hold a function's address;
// false if the file cannot be read.
func nameData(path string, name func(uint64)) bool {
	ef, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer ef.Close()
	for _, s := range ef.Sections {
		switch {
		case s.Type == elf.SHT_RELA:
			b, err := s.Data()
			if err != nil {
				return false
			}
			for i := 0; i+24 <= len(b); i += 24 {
				name(binary.LittleEndian.Uint64(b[i+16:]))
			}
		case s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR == 0 && s.Type != elf.SHT_NOBITS:
			b, err := s.Data()
			if err != nil {
				return false
			}
			for i := int((8 - s.Addr%8) % 8); i+8 <= len(b); i += 8 {
				name(binary.LittleEndian.Uint64(b[i:]))
			}
		}
	}
	dyn, _ := ef.DynamicSymbols()
	for _, d := range dyn {
		if d.Section != elf.SHN_UNDEF {
			name(d.Value)
		}
	}
	return true
}

// callSites returns the call sites of the function at start, or false
// when it cannot be probed at its callers: a call the index may not
// know of (its address named otherwise, code that did not decode), a
// call whose return point is neither an instruction the kernel emulates
// that only the return reaches nor an epilogue of a caller whose exit
// probes see (exitSeen), or a call on an address taken (entries).
func (idx *callIndex) callSites(f *symbolize.File, start uint64, exitSeen func(caller uint64) bool, taken map[uint64]bool) ([]CallSite, bool) {
	refs := idx.calls[start]
	if !idx.complete || idx.named[start] || len(refs) == 0 {
		return nil, false
	}
	fileOff := func(addr uint64) uint64 { off, _ := f.FileOffset(addr); return off }
	var out []CallSite
	for _, r := range refs {
		c := r.caller
		call := c.ins[r.k]
		if !emulated(call.raw) || r.k+1 >= len(c.ins) {
			return nil, false // a prefixed call; or one at the end, never meant to return
		}
		cs := CallSite{Call: fileOff(c.fn.Addr + uint64(call.off))}
		if taken[cs.Call] {
			return nil, false
		}
		ret := c.ins[r.k+1]
		switch {
		case emulated(ret.raw) && !c.landing[ret.off] && !c.indirect:
			cs.Return = fileOff(c.fn.Addr + uint64(ret.off))
		case epilogue(c.ins[r.k+1:]) && exitSeen(c.fn.Addr):
			cs.WithCaller = true
		default:
			return nil, false
		}
		out = append(out, cs)
	}
	return out, true
}

// epilogue reports whether ins, from their first, only restore the
// stack and return.
func epilogue(ins []insn) bool {
	for _, in := range ins {
		switch {
		case in.op == x86asm.RET:
			return true
		case in.op == x86asm.POP, in.op == x86asm.LEAVE:
		case in.writesSP && (in.op == x86asm.ADD || in.op == x86asm.LEA || in.op == x86asm.MOV):
		default:
			return false
		}
	}
	return false
}

// probeAtCallers moves the sites whose entry instruction the kernel
// single-steps to their callers' call instructions where every call is
// known (callSites), sites being all the functions Plan probes in the
// module f, with return probes; index gives the module's calls. A site whose calls end with a
// caller that moves too stays where it is: that caller's exit is no
// longer an event.
func probeAtCallers(f *symbolize.File, sites []Site, index func() *callIndex) {
	var stepped []int
	for i, s := range sites {
		if !s.Emulated && s.Return {
			stepped = append(stepped, i)
		}
	}
	if len(stepped) == 0 {
		return
	}
	idx := index()
	returns := map[uint64]bool{} // functions whose exit is a return probe
	taken := map[uint64]bool{}   // file offsets holding another probe
	for _, s := range sites {
		if s.Return {
			returns[s.Start] = true
		}
		taken[s.Entry] = true
	}
	exitSeen := func(addr uint64) bool { return returns[addr] }
	calls := map[int][]CallSite{}
	for _, i := range stepped {
		if cs, ok := idx.callSites(f, sites[i].Start, exitSeen, taken); ok {
			calls[i] = cs
		}
	}
	moving := map[uint64]bool{}
	for i := range calls {
		moving[sites[i].Start] = true
	}
	for i, cs := range calls {
		for _, r := range idx.calls[sites[i].Start] {
			if moving[r.caller.fn.Addr] && withCaller(cs, f, r) {
				delete(calls, i)
				break
			}
		}
	}
	for i, cs := range calls {
		sites[i].Calls, sites[i].Return, sites[i].Emulated = cs, false, true
	}
}

// withCaller reports whether the call r is one of cs that its caller's
// exit ends.
func withCaller(cs []CallSite, f *symbolize.File, r callRef) bool {
	off, _ := f.FileOffset(r.caller.fn.Addr + uint64(r.caller.ins[r.k].off))
	for _, c := range cs {
		if c.Call == off {
			return c.WithCaller
		}
	}
	return false
}

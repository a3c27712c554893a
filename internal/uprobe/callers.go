package uprobe

import (
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"

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

// callRef is a direct call, with what callSites needs to know of the
// instruction it returns to. Addresses are ELF virtual addresses.
type callRef struct {
	caller, call, ret uint64 // the calling function, the call, the instruction after it
	// callEmulated: the call is one the kernel emulates (no prefix).
	// retEmulated: so is the instruction at ret, and only the return
	// reaches it (no branch of the caller lands there, and the caller
	// has no indirect jump). epilogue: from ret the caller only
	// restores the stack and returns. last: nothing follows the call
	// in its function.
	callEmulated, retEmulated, epilogue, last bool
}

// maxIndexCode bounds the code indexCalls decodes (about 17 MB a second
// here): a larger module is left unindexed, its functions probed at
// their own entries and, if it throws, exiting by RET probes.
const maxIndexCode = 16 << 20

// indexCache keeps the call indexes of the last few modules indexed,
// each under its file's identity: --root plans the callees of each
// function of its subgraph as it first runs, in the same few modules,
// while the target is held, and decoding a module again each time cost
// 80 ms for libstdc++ and 2 s for libLLVM here.
var indexCache struct {
	sync.Mutex
	keys []fileKey
	idx  []*callIndex
}

// indexCacheSize is how many modules indexCache keeps.
const indexCacheSize = 4

// fileKey identifies a file's contents: the same path replaced by
// another file (a rebuild) has another.
type fileKey struct {
	path      string
	dev, ino  uint64
	size      int64
	mtimeNano int64
}

// cachedIndex returns the call index of f, the file at path, from
// indexCache or made by indexCalls.
func cachedIndex(f *symbolize.File, path string) *callIndex {
	st, err := os.Stat(path)
	if err != nil {
		return indexCalls(f)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return indexCalls(f)
	}
	key := fileKey{path, uint64(sys.Dev), sys.Ino, st.Size(), st.ModTime().UnixNano()}
	c := &indexCache
	c.Lock()
	defer c.Unlock()
	if i := slices.Index(c.keys, key); i >= 0 {
		return c.idx[i]
	}
	idx := indexCalls(f)
	c.keys, c.idx = append(c.keys, key), append(c.idx, idx)
	if len(c.keys) > indexCacheSize {
		c.keys, c.idx = c.keys[1:], c.idx[1:]
	}
	return idx
}

// indexCalls decodes every function of f and reads the words that may
// hold their addresses (File.AddressWords). It keeps, of each function,
// its calls and what it names: decoded instructions of a large library
// would take hundreds of megabytes.
func indexCalls(f *symbolize.File) *callIndex {
	idx := &callIndex{calls: map[uint64][]callRef{}, named: map[uint64]bool{}, safe: map[uint64]bool{}, complete: true}
	funcs := map[uint64]symbolize.Function{}
	total := uint64(0)
	for _, fn := range f.Functions() {
		if _, ok := funcs[fn.Addr]; !ok {
			funcs[fn.Addr] = fn
			// Sizes come from the file: each is clamped, and the sum
			// stops past the bound, so that it cannot wrap.
			if total += min(fn.Size, maxIndexCode+1); total > maxIndexCode {
				idx.complete = false
				return idx
			}
		}
	}
	name := func(addr uint64) {
		if _, ok := funcs[addr]; ok {
			idx.named[addr] = true
		}
	}
	callees := map[uint64][]uint64{} // the functions each one branches to
	opaque := map[uint64]bool{}      // functions with an indirect call or jump
	// into holds the addresses that jumps from other functions land on
	// inside a function: a cold part's jumps back into its function. A
	// return point one lands on is reached without the call returning.
	into := map[uint64]bool{}
	for addr, fn := range funcs {
		code, err := f.Code(addr, fn.Size)
		if err != nil {
			continue // no code to call: an alias of data or an absolute symbol
		}
		ins, err := decodeFunc(code)
		if err != nil {
			// Its calls are unknown: an exception may pass through it,
			// and a call of another function from it would be an entry
			// no call site sees.
			idx.complete, opaque[addr] = false, true
			continue
		}
		landing, indirect := map[int]bool{}, false
		for _, in := range ins {
			switch {
			case in.direct && in.target >= 0 && uint64(in.target) < fn.Size:
				landing[in.target] = true
			case in.direct:
				callees[addr] = append(callees[addr], addr+uint64(in.target))
				if in.op != x86asm.CALL {
					name(addr + uint64(in.target)) // a jump into another function: a tail call
					into[addr+uint64(in.target)] = true
				}
			case in.op == x86asm.JMP:
				indirect, opaque[addr] = true, true
			case in.op == x86asm.CALL:
				opaque[addr] = true
			}
			if in.hasRIP {
				name(addr + uint64(in.ripRef))
			}
			if in.hasImm && in.immRef > 0 {
				name(uint64(in.immRef))
			}
		}
		// A cold part's calls are its function's: that function's exit
		// probes see them return (callSites' epilogue).
		caller := addr
		if parent, cold := f.ColdParent(addr); cold && parent.Name != "" {
			caller = parent.Addr
		}
		for k, in := range ins {
			if in.op != x86asm.CALL || !in.direct {
				continue
			}
			r := callRef{caller: caller, call: addr + uint64(in.off), ret: addr + uint64(in.off+in.len),
				callEmulated: emulated(in.raw), last: k+1 == len(ins)}
			if !r.last {
				next := ins[k+1]
				r.retEmulated = emulated(next.raw) && !landing[next.off] && !indirect
				r.epilogue = epilogue(ins[k+1:])
			}
			target := addr + uint64(in.target)
			idx.calls[target] = append(idx.calls[target], r)
		}
	}
	for _, refs := range idx.calls {
		for i := range refs {
			if into[refs[i].ret] {
				refs[i].retEmulated = false
			}
		}
	}
	if !f.AddressWords(name) {
		idx.complete = false
	}
	idx.findSafe(funcs, callees, opaque)
	return idx
}

// findSafe fills idx.safe: the functions of funcs that branch (callees)
// to nothing but functions of funcs that are safe too, by elimination
// from all those without indirect branches (opaque); recursion among
// safe functions stays safe. A call to anything else (a PLT stub:
// __cxa_throw, a library) may throw. The elimination walks the calls
// backwards from the unsafe functions, each call once: linear in the
// module's calls, where rescanning every function until nothing changed
// took passes as many as the longest chain of calls.
func (idx *callIndex) findSafe(funcs map[uint64]symbolize.Function, callees map[uint64][]uint64, opaque map[uint64]bool) {
	unsafe := map[uint64]bool{}
	var work []uint64
	mark := func(addr uint64) {
		if !unsafe[addr] {
			unsafe[addr] = true
			work = append(work, addr)
		}
	}
	for addr := range funcs {
		if opaque[addr] {
			mark(addr)
		}
	}
	callers := map[uint64][]uint64{} // the reverse of callees, within funcs
	for addr, gs := range callees {
		for _, g := range gs {
			if _, ok := funcs[g]; ok {
				callers[g] = append(callers[g], addr)
			} else {
				mark(addr)
			}
		}
	}
	for len(work) > 0 {
		g := work[len(work)-1]
		work = work[:len(work)-1]
		for _, c := range callers[g] {
			mark(c)
		}
	}
	for addr := range funcs {
		if !unsafe[addr] {
			idx.safe[addr] = true
		}
	}
}

// nothrow reports whether no C++ exception can pass through the
// function at addr (findSafe), so that a return probe may replace its
// return address.
func (idx *callIndex) nothrow(addr uint64) bool { return idx.safe[addr] }

// callSites returns the call sites of the function at start, or false
// when it cannot be probed at its callers: a call the index may not
// know of (its address named otherwise, code that did not decode), a
// call whose return point is neither an instruction the kernel emulates
// that only the return reaches nor an epilogue of a caller whose exit
// probes see (exitSeen), or a call on an address taken (file offsets
// holding another probe).
func (idx *callIndex) callSites(f *symbolize.File, start uint64, exitSeen func(caller uint64) bool, taken map[uint64]bool) ([]CallSite, bool) {
	refs := idx.calls[start]
	if !idx.complete || idx.named[start] || len(refs) == 0 {
		return nil, false
	}
	fileOff := func(addr uint64) uint64 { off, _ := f.FileOffset(addr); return off }
	var out []CallSite
	for _, r := range refs {
		if !r.callEmulated || r.last {
			return nil, false // a prefixed call; or one at the end, never meant to return
		}
		cs := CallSite{Call: fileOff(r.call)}
		switch {
		case taken[cs.Call]:
			return nil, false
		case r.retEmulated:
			cs.Return = fileOff(r.ret)
			if taken[cs.Return] {
				return nil, false // another site's entry or RET probe
			}
		case r.epilogue && exitSeen(r.caller):
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
// longer an event. No call or return point of a moved site is an offset
// of taken (probed by an earlier set: Options.Taken) or of another
// site's entry or exit probes: the kernel runs the probes of one
// instruction in no order, and Attach refuses such a set. With jumps
// (the module can leave a function without its return: longjmp, an
// unwinder), only functions that call nothing that could (nothrow) move:
// the exit probe at a return point never fires for a call left so, and
// the call would stay open, its caller's later calls nested in it.
func probeAtCallers(f *symbolize.File, sites []Site, index func() *callIndex, taken map[uint64]bool, jumps bool) {
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
	taken = maps.Clone(taken)    // file offsets holding another probe
	if taken == nil {
		taken = map[uint64]bool{}
	}
	for _, s := range sites {
		if s.Return {
			returns[s.Start] = true
		}
		taken[s.Entry] = true
		for _, x := range s.Exits {
			taken[x] = true
		}
	}
	exitSeen := func(addr uint64) bool { return returns[addr] }
	calls := map[int][]CallSite{}
	for _, i := range stepped {
		if jumps && !idx.nothrow(sites[i].Start) {
			continue
		}
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
			if moving[r.caller] && withCaller(cs, f, r) {
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
	off, _ := f.FileOffset(r.call)
	for _, c := range cs {
		if c.Call == off {
			return c.WithCaller
		}
	}
	return false
}

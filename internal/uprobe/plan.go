package uprobe

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/arch/x86/x86asm"

	"trueprof/internal/symbolize"
)

// Site is where one function is probed. Offsets are file offsets, what the
// uprobe interfaces take.
type Site struct {
	Function string // demangled name
	Start    uint64 // the function's ELF virtual address
	// StartOffset is Start's file offset: the recorder names the
	// function by it, wherever the entry probe sits.
	StartOffset uint64
	Entry       uint64   // file offset of the entry probe
	Exits       []uint64 // file offsets of RET-instruction probes (Go), empty when Return is used
	Return      bool     // use a uretprobe at Entry for the exit
	Emulated    bool     // whether the entry instruction is one the kernel emulates (cheap)
	// Calls, when not empty, probe the function at its callers instead
	// of at Entry: every call of it is known and its entry instruction
	// is single-stepped (probeAtCallers). Return and Exits are then
	// unused, and Emulated is true: calls, and the instructions they
	// return to, are emulated.
	Calls []CallSite
	// Hold makes the entry probe stop the process until Set.Release
	// (Attach). Plan never sets it: the caller does.
	Hold bool
}

// Errors of Plan, for errors.Is.
var (
	// ErrNoMatch means no function of the file matches the patterns.
	ErrNoMatch = errors.New("no function matches")
	// ErrStripped means the file has no function symbols to match.
	ErrStripped = errors.New("no function symbols (stripped binary)")
	// ErrNotSupported means the file or the machine cannot be probed.
	ErrNotSupported = errors.New("not supported")
	errDecode       = errors.New("undecodable instruction")
)

// SkipError lists the matched functions Plan left out, with the reason,
// sorted by name. Plan returns it with the sites it could plan.
type SkipError struct {
	Path    string
	Skipped []Skipped
}

// Skipped is a function Plan could not probe safely.
type Skipped struct {
	Function string
	Reason   error
}

// Error implements error.
func (e *SkipError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d matching functions not probed:", e.Path, len(e.Skipped))
	for i, s := range e.Skipped {
		if i == 5 {
			fmt.Fprintf(&b, " ... and %d more", len(e.Skipped)-i)
			break
		}
		fmt.Fprintf(&b, " %s (%v);", s.Function, s.Reason)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Plan finds the probe sites for the functions of the ELF file at path
// matching any pattern. A pattern is a glob (*, ?, [...]) on the demangled
// name, optionally prefixed by "module:" where module is a glob on the
// file's names (moduleNames: its base name, its real file's base name and
// its soname, so "libz.so.1:", "libz.so.1.2.13:", "libz*:" and "*:" all
// name zlib, however it was linked or loaded); a pattern for another
// module is ignored. A C++ pattern without a
// parameter list matches every overload. Sites are sorted by Start, one per
// address, named by the first alias a pattern matches (preferred aliases
// first, as symbolize.File.Functions orders them).
//
// Go functions (the file has a .gopclntab) get an entry probe after the
// stack-growth check, on the push %rbp the kernel emulates, and exit
// probes on their RET instructions; every other function gets a
// uretprobe, or, when its entry instruction is one the kernel
// single-steps and all its calls are known, probes at its callers
// (Site.Calls); in a module that may leave a function without its
// return (longjmp, C++ exceptions), only if nothing it calls could.
// Plan returns ErrStripped when the file has no function
// symbols, ErrNoMatch when nothing matches, and a *SkipError alongside the
// sites when some matching Go functions cannot be disassembled.
func Plan(path string, patterns []string) ([]Site, error) {
	return PlanOptions(path, patterns, Options{})
}

// Options are Plan's for a module some of whose functions are probed
// already.
type Options struct {
	// Taken holds the file offsets of the module that carry probes of
	// sets attached earlier (--root's callees, probes added while the
	// target runs): no call-site probe is placed on one, as the kernel
	// runs the probes of one instruction, from two sets, in no order a
	// reader could rely on.
	Taken map[uint64]bool
}

// PlanOptions is Plan with options.
func PlanOptions(path string, patterns []string, o Options) ([]Site, error) {
	f, err := openX86(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	modules := moduleNames(path, f)
	match, err := compilePatterns(modules, patterns)
	if err != nil {
		return nil, err
	}
	// A file no pattern names is no match, stripped or not: a stripped
	// executable must not refuse --trace 'libz.so.1:deflate'.
	if match == nil {
		return nil, fmt.Errorf("%s: %w: no pattern names module %s", path, ErrNoMatch, strings.Join(modules, " or "))
	}
	funcs := f.Functions()
	if len(funcs) == 0 {
		return nil, fmt.Errorf("%s: %w; rebuild it without -s or strip, or probe an unstripped copy", path, ErrStripped)
	}
	var sites []Site
	skip := &SkipError{Path: path}
	lastAddr := uint64(0)
	var idx *callIndex // the module's calls, decoded once when needed
	index := func() *callIndex {
		if idx == nil {
			idx = cachedIndex(f, path)
		}
		return idx
	}
	// Go code exits by RET probes whatever it imports.
	throws := !f.IsGo() && throwsThrough(f)
	for _, fn := range funcs {
		if fn.Addr == lastAddr || !match(fn.Name) {
			continue
		}
		lastAddr = fn.Addr
		if f.IsGo() && goSwitches[strings.TrimSuffix(fn.Name, ".abi0")] {
			skip.Skipped = append(skip.Skipped, Skipped{fn.Name, errGoSwitch})
			continue
		}
		if parent, cold := f.ColdParent(fn.Addr); cold {
			// Code of its function, which the function's probes cover
			// (planFunction): an entry probe here would count every
			// jump into it as a call.
			if parent.Name == "" || !match(parent.Name) {
				skip.Skipped = append(skip.Skipped, Skipped{fn.Name, coldPartError(parent)})
			}
			continue
		}
		retprobe := !f.IsGo() && (!throws || index().nothrow(fn.Addr))
		s, err := planFunction(f, fn, retprobe)
		if err != nil {
			skip.Skipped = append(skip.Skipped, Skipped{fn.Name, err})
			continue
		}
		sites = append(sites, s)
	}
	if len(sites) == 0 && len(skip.Skipped) == 0 {
		return nil, fmt.Errorf("%s: %w %q", path, ErrNoMatch, patterns)
	}
	if !f.IsGo() {
		probeAtCallers(f, sites, index, o.Taken, throws || jumpsOut(f))
	}
	if len(skip.Skipped) > 0 {
		slices.SortFunc(skip.Skipped, func(a, b Skipped) int { return strings.Compare(a.Function, b.Function) })
		return sites, skip
	}
	return sites, nil
}

// openX86 opens the ELF file at path if it is x86-64 code. Its separate
// debug file is not looked for: probes need code and symbols only.
func openX86(path string) (*symbolize.File, error) {
	f, err := symbolize.OpenFileOptions(path, symbolize.Options{NoDebugFile: true})
	var format *elf.FormatError
	if errors.As(err, &format) {
		// debug/elf's errors do not name the file.
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return nil, err
	}
	if m := f.Machine(); m != elf.EM_X86_64 {
		f.Close()
		return nil, fmt.Errorf("%s: %w: machine %v (only x86-64)", path, ErrNotSupported, m)
	}
	return f, nil
}

// planFunction reads a function's code and places its probes. With
// retprobe, its exit is a return probe: the kernel single-steps a probed
// RET (about 13 µs a hit here) but returns through a return probe's
// trampoline in about 0.26 µs. Without, its exits are probed on the
// instructions that leave it: the caller passes retprobe false where a
// replaced return address would break something (Go's moving stacks, a
// C++ exception's unwinder, which finds no frame for the trampoline's
// address and terminates the program), and unwinding past a RET probe
// merely skips an exit, which the analysis repairs. longjmp needs no RET
// probes: the kernel drops the return probes of the frames it leaves
// (their stack lies below the stack pointer at the next probe hit or
// return; Linux's uprobes "longjmp fixes", 4.5).
func planFunction(f *symbolize.File, fn symbolize.Function, retprobe bool) (Site, error) {
	code, err := f.Code(fn.Addr, fn.Size)
	if err != nil {
		return Site{}, err
	}
	// Code's segment holds the whole function: every address in it has
	// a file offset.
	fileOff := func(addr uint64) uint64 { off, _ := f.FileOffset(addr); return off }
	s := Site{Function: fn.Name, Start: fn.Addr, StartOffset: fileOff(fn.Addr), Entry: fileOff(fn.Addr)}
	ins, err := decodeFunc(code)
	if err != nil {
		if !retprobe {
			// A missed RET would leave calls open forever: refuse instead.
			return Site{}, err
		}
		// A function that cannot be fully decoded keeps its entry probe
		// at the start, which is always an instruction boundary.
		s.Return = true
		return s, nil
	}
	if retprobe {
		s.Return = true
	} else {
		exits, err := exitAddrs(f, fn, ins, len(code))
		if err != nil {
			return Site{}, err
		}
		for _, addr := range exits {
			s.Exits = append(s.Exits, fileOff(addr))
		}
	}
	if len(ins) > 0 {
		k := chooseEntry(ins, retprobe)
		s.Entry = fileOff(fn.Addr + uint64(ins[k].off))
		s.Emulated = emulated(ins[k].raw)
	}
	return s, nil
}

// exitAddrs returns the addresses of the instructions by which the
// function fn, decoded as ins from size bytes of code, leaves: every RET
// and every direct JMP out of its code (a tail call), where its code
// includes its cold parts (symbolize.File.ColdParts). The function jumps
// into a part, which jumps back or returns for it: those jumps stay
// inside, and a part's RETs are the function's exits. A part that does
// not decode is an error, as the function's own code would be: a missed
// RET would leave calls open.
func exitAddrs(f *symbolize.File, fn symbolize.Function, ins []insn, size int) ([]uint64, error) {
	type part struct {
		addr uint64
		ins  []insn
		size int
	}
	parts := []part{{fn.Addr, ins, size}}
	for _, c := range f.ColdParts(fn.Addr) {
		code, err := f.Code(c.Addr, c.Size)
		if err != nil {
			return nil, err
		}
		cins, err := decodeFunc(code)
		if err != nil {
			return nil, fmt.Errorf("its cold part %s: %w", c.Name, err)
		}
		parts = append(parts, part{c.Addr, cins, len(code)})
	}
	var exits []uint64
	for _, p := range parts {
		inside := func(target int) bool {
			addr := p.addr + uint64(int64(target))
			return slices.ContainsFunc(parts, func(q part) bool { return addr-q.addr < uint64(q.size) })
		}
		for _, off := range exitInsns(p.ins, inside) {
			exits = append(exits, p.addr+uint64(off))
		}
		for _, off := range indirectTailCalls(f, p.addr, p.ins) {
			exits = append(exits, p.addr+uint64(off))
		}
	}
	slices.Sort(exits)
	return exits, nil
}

// indirectTailCalls returns the offsets, from addr, of the indirect
// JMPs of the code at addr (decoded: ins) that leave its function: tail
// calls through memory or a register. Rust's allocator shims end with
// jmp *malloc@GOT(%rip), and calls through a vtable end so (core::fmt's
// pad_integral); in a run of the corpus's Rust program the analysis had
// to repair 2,000,000 exits these skipped. A jump is one when
//   - it reads a RIP-relative slot (a GOT entry, a function pointer: a
//     table inside the function is indexed, which RIP-relative operands
//     cannot be), or
//   - it comes right after the epilogue (a pop, leave or stack
//     adjustment), or
//   - it goes through a pointer loaded without an index (pointerJump:
//     a vtable's slot, jmp *0x20(%rax), or mov 0x20(%rax),%rax before
//     jmp *%rax, in a function without a frame),
//
// and the CFI says the frame is gone there (the CFA is %rsp+8, the
// return address on top as at the entry) in the same CFI entry as addr
// (symbolize.File.FDERange): the code is the function's as its compiler
// described it, not code a symbol without a size runs into (_init's
// guessed extent holds the .plt's jmp *GOT stubs). A table jump is none
// of these: its target comes from an indexed load (a frameless
// function's CFA is %rsp+8 throughout). Code without CFI keeps its
// indirect jumps unprobed, and so does a jump whose target the block
// does not show: the analysis repairs the exits they skip.
func indirectTailCalls(f *symbolize.File, addr uint64, ins []insn) []int {
	lo, hi, ok := f.FDERange(addr)
	if !ok {
		return nil
	}
	var landing map[int]bool // branch targets inside the code, made once needed
	var out []int
	for k, in := range ins {
		if in.op != x86asm.JMP || in.direct {
			continue
		}
		jmp := addr + uint64(in.off)
		if jmp < lo || jmp >= hi {
			continue
		}
		epilogue := k > 0 && (ins[k-1].op == x86asm.POP || ins[k-1].op == x86asm.LEAVE ||
			ins[k-1].writesSP && (ins[k-1].op == x86asm.ADD || ins[k-1].op == x86asm.LEA))
		if !in.hasRIP && !epilogue {
			if landing == nil {
				landing = map[int]bool{}
				for _, b := range ins {
					if b.direct {
						landing[b.target] = true
					}
				}
			}
			if !pointerJump(ins, k, landing) {
				continue
			}
		}
		off, ok := f.FileOffset(jmp)
		if !ok {
			continue
		}
		if rule, ok := f.CFA(off); ok && rule.ReturnOnTop() {
			out = append(out, in.off)
		}
	}
	return out
}

// pointerJump reports whether the indirect jump ins[k] goes through a
// pointer loaded without an index register: jmp *disp(%base), or jmp
// *%reg where the last write of reg is mov disp(%base),%reg, in a basic
// block (no branch, call or branch target, landing, before the jump)
// with no indexed operand at all. A jump table's target comes from an
// indexed load or address (movslq (%rdx,%rax,4), lea (%rcx,%rax,8),
// jmp *T(,%rax,8)); a write it cannot follow (an arithmetic one, an
// implicit one, an instruction only measured) makes the answer no.
func pointerJump(ins []insn, k int, landing map[int]bool) bool {
	start := k // the first instruction of the jump's block
	for start > 0 && !landing[ins[start].off] && ins[start-1].op != x86asm.CALL && !isBranch(ins[start-1].op) {
		start--
	}
	if slices.ContainsFunc(ins[start:k+1], func(in insn) bool { return in.indexed }) {
		return false
	}
	j := ins[k]
	if j.dst == 0 {
		return j.slot // jmp *disp(%base)
	}
	for i := k - 1; i >= start; i-- {
		d := ins[i]
		if implicitWrites[d.op] || d.op == opMeasured {
			return false
		}
		if d.dst == 0 || regFamily(d.dst) != regFamily(j.dst) {
			continue
		}
		return d.op == x86asm.MOV && d.dst == j.dst && d.slot
	}
	return false
}

// implicitWrites are the instructions that write general registers not
// named as their destination.
var implicitWrites = map[x86asm.Op]bool{
	x86asm.MUL: true, x86asm.IMUL: true, x86asm.DIV: true, x86asm.IDIV: true, x86asm.CQO: true, x86asm.CDQ: true,
	x86asm.CWD: true, x86asm.XCHG: true, x86asm.CMPXCHG: true, x86asm.CPUID: true, x86asm.RDTSC: true,
	x86asm.RDTSCP: true, x86asm.SYSCALL: true, x86asm.XADD: true, x86asm.LODSQ: true,
}

// regFamily names the 64-bit register r is part of ("AX" for AL, EAX and
// RAX; "R8" for R8B and R8L).
func regFamily(r x86asm.Reg) string {
	s := r.String()
	if len(s) > 1 && s[0] == 'R' && s[1] >= '0' && s[1] <= '9' {
		return strings.TrimRight(s, "LWB")
	}
	s = strings.TrimPrefix(strings.TrimPrefix(s, "R"), "E")
	switch s {
	case "AL", "AH":
		return "AX"
	case "CL", "CH":
		return "CX"
	case "DL", "DH":
		return "DX"
	case "BL", "BH":
		return "BX"
	}
	return strings.TrimSuffix(s, "B") // SPB, BPB, SIB, DIB
}

// goSwitches are the Go runtime's functions that switch stacks or
// goroutines and never return to their caller by their own RET: mcall
// saves the goroutine and runs its argument on g0, and the goroutine
// resumes in mcall's caller (gogo); morestack and newstack restart the
// function on a new stack; the scheduler's functions on g0 end in
// gogo; goexit and mstart never return. Probed, each of their calls is
// left open until a caller's exit: --root main.worker on a Go program
// whose goroutines sleep probed runtime.mcall through time.Sleep and
// gopark, and 693 calls had no exit, every later call of their
// goroutine nested under them.
var goSwitches = map[string]bool{
	"runtime.mcall": true, "runtime.gogo": true, "runtime.morestack": true, "runtime.morestack_noctxt": true, "runtime.morestackc": true,
	"runtime.newstack": true, "runtime.schedule": true, "runtime.execute": true, "runtime.park_m": true,
	"runtime.gosched_m": true, "runtime.goschedguarded_m": true, "runtime.gopreempt_m": true,
	"runtime.preemptPark": true, "runtime.goyield_m": true, "runtime.exitsyscall0": true,
	"runtime.goexit": true, "runtime.goexit0": true, "runtime.goexit1": true, "runtime.Goexit": true,
	"runtime.mstart": true, "runtime.mstart0": true, "runtime.mstart1": true, "runtime.rt0_go": true,
	"runtime.coroswitch_m": true,
}

// errGoSwitch is why Plan leaves out a function of goSwitches.
var errGoSwitch = errors.New("switches stacks or goroutines and never returns to its caller")

// coldPartError is why Plan leaves out a cold part whose function it
// does not probe.
func coldPartError(parent symbolize.Function) error {
	if parent.Name == "" {
		return errors.New("a cold part of a function without a symbol, entered by jumps and never called")
	}
	return fmt.Errorf("a cold part of %s, entered by jumps and never called: trace %s", parent.Name, parent.Name)
}

// unwindSymbols are the symbols of C++ unwinding: throwing, rethrowing,
// resuming an unwind after a cleanup, catching and the personality
// routine (forced unwinds, pthread_cancel's, too). A module that imports
// or defines one can host an exception's unwinding, whose unwinder a
// return probe's trampoline address stops.
var unwindSymbols = map[string]bool{
	"__cxa_throw": true, "__cxa_rethrow": true, "__cxa_begin_catch": true, "__gxx_personality_v0": true,
	"_Unwind_RaiseException": true, "_Unwind_Resume": true, "_Unwind_ForcedUnwind": true,
}

// unwindLibraries are the libraries whose users can throw C++ exceptions
// (DT_NEEDED names, without their versions).
var unwindLibraries = []string{"libstdc++.so", "libc++.so", "libc++abi.so", "libgcc_s.so"}

// throwsThrough reports whether the module f can host C++ unwinding,
// so that an exception may pass through its functions: it imports or defines a symbol of unwindSymbols or libstdc++'s
// throwing helpers (std::__throw_out_of_range_fmt and its kind, which
// std::vector::at calls: _ZSt*__throw_*), or it needs a C++ runtime or
// the unwinder's library. Then only the functions nothrow finds get
// return probes. A static C++ program defines them all.
func throwsThrough(f *symbolize.File) bool {
	throwing := func(mangled string) bool {
		return unwindSymbols[mangled] || strings.HasPrefix(mangled, "_ZSt") && strings.Contains(mangled, "__throw_")
	}
	for _, fn := range f.Functions() { // demangled names, of .symtab or else .dynsym
		if unwindSymbols[fn.Name] || strings.HasPrefix(fn.Name, "std::__throw_") {
			return true
		}
	}
	if f.HasDynamicSymbol(throwing) {
		return true
	}
	for _, lib := range f.Needed() {
		for _, l := range unwindLibraries {
			if lib == l || strings.HasPrefix(lib, l+".") {
				return true
			}
		}
	}
	return false
}

// jumpSymbols are the functions that leave the functions between a
// setjmp and themselves without returning from them.
var jumpSymbols = []string{"longjmp", "_longjmp", "siglongjmp", "__longjmp_chk", "__libc_longjmp"}

// jumpsOut reports whether the module imports or defines a longjmp, so
// that a function of it may be left without its return.
func jumpsOut(f *symbolize.File) bool {
	if slices.ContainsFunc(jumpSymbols, f.Imports) {
		return true
	}
	return slices.ContainsFunc(f.Functions(), func(fn symbolize.Function) bool {
		return slices.Contains(jumpSymbols, fn.Name)
	})
}

// moduleNames returns the names a pattern's module part may give f, the
// file at path: its base name (a DT_NEEDED library is found under the
// name the program asked for, libz.so.1), its real file's base name (what
// the kernel maps after dlopen, libz.so.1.2.13) and its DT_SONAME,
// without repeats. A name that cannot be read is left out.
func moduleNames(path string, f *symbolize.File) []string {
	names := []string{filepath.Base(path)}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		names = append(names, filepath.Base(real))
	}
	names = append(names, f.Sonames()...)
	slices.Sort(names)
	return slices.Compact(names)
}

// compilePatterns returns a matcher for the patterns that apply to a
// module known by any of modules, or nil if none does.
func compilePatterns(modules []string, patterns []string) (func(string) bool, error) {
	var res []*regexp.Regexp
	for _, p := range patterns {
		mod, glob := SplitModule(p)
		if mod != "" {
			modRe, err := globRegexp(mod)
			if err != nil {
				return nil, fmt.Errorf("pattern %q: module: %w", p, err)
			}
			if !slices.ContainsFunc(modules, modRe.MatchString) {
				continue
			}
		}
		re, err := globRegexp(glob)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", p, err)
		}
		res = append(res, re)
	}
	if len(res) == 0 {
		return nil, nil
	}
	return func(name string) bool {
		short := withoutParams(name)
		for _, re := range res {
			if re.MatchString(name) || (short != name && re.MatchString(short)) {
				return true
			}
		}
		return false
	}, nil
}

// SplitModule splits a pattern "module:glob" at the first single colon;
// the double colons of C++ names do not split. A pattern without a
// module gives "" and the pattern.
func SplitModule(p string) (module, glob string) {
	for i := 0; i < len(p); i++ {
		if p[i] != ':' {
			continue
		}
		if i+1 < len(p) && p[i+1] == ':' {
			i++
			continue
		}
		return p[:i], p[i+1:]
	}
	return "", p
}

// globRegexp translates a glob to an anchored regular expression. Unlike
// path.Match, * also matches '/', which Go package paths contain.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			j := strings.IndexByte(glob[i+1:], ']')
			if j < 0 {
				return nil, errors.New("unterminated [")
			}
			class := glob[i+1 : i+1+j]
			if j == 0 { // "[]...]": ']' first is literal
				k := strings.IndexByte(glob[i+2:], ']')
				if k < 0 {
					return nil, errors.New("unterminated [")
				}
				class = glob[i+1 : i+2+k]
				j = k + 1
			}
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
			}
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// withoutParams drops the parameter list and qualifiers of a demangled C++
// name: "ns::f(int) const" -> "ns::f".
func withoutParams(name string) string {
	end := strings.LastIndexByte(name, ')')
	if end < 0 || strings.ContainsAny(name[end:], ".(") {
		return name // not a parameter list: Go's "pkg.(*T).Method"
	}
	depth := 0
	for i := end; i >= 0; i-- {
		switch name[i] {
		case ')':
			depth++
		case '(':
			depth--
			if depth == 0 {
				if i == 0 {
					return name
				}
				return name[:i]
			}
		}
	}
	return name
}

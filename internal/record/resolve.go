package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"trueprof/internal/calibrate/calfit"

	"trueprof/internal/perf"
	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
	"trueprof/internal/unwind"
)

// Module names for code that is not in a file.
const (
	moduleKernel  = "[kernel.kallsyms]"
	moduleJIT     = "[jit]"
	moduleUnknown = "[unknown]"
)

// mapping is one executable mapping of a process.
type mapping struct {
	start, end, pgoff uint64
	path              string
	buildID           []byte
	time              uint64
}

// addrSpace is a process's executable mappings at the current point of
// the time-ordered record stream, sorted by start.
type addrSpace struct {
	maps []mapping
}

// insert adds m, trimming whatever it overlaps as mmap(2) does.
func (as *addrSpace) insert(m mapping) {
	out := as.maps[:0:0]
	for _, o := range as.maps {
		if o.end <= m.start || o.start >= m.end {
			out = append(out, o)
			continue
		}
		if o.start < m.start {
			left := o
			left.end = m.start
			out = append(out, left)
		}
		if o.end > m.end {
			right := o
			right.pgoff += m.end - o.start
			right.start = m.end
			out = append(out, right)
		}
	}
	out = append(out, m)
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	as.maps = out
}

// find returns the mapping containing addr, or nil.
func (as *addrSpace) find(addr uint64) *mapping {
	i := sort.Search(len(as.maps), func(i int) bool { return as.maps[i].end > addr })
	if i < len(as.maps) && as.maps[i].start <= addr {
		return &as.maps[i]
	}
	return nil
}

func (as *addrSpace) clone() *addrSpace {
	return &addrSpace{maps: append([]mapping(nil), as.maps...)}
}

// moduleFile is an opened module, or the reason it could not be used.
type moduleFile struct {
	f   *symbolize.File
	err error
}

// locKey identifies a resolved address: code in a file is shared by every
// process mapping it; other code is keyed by process and resolved name.
type locKey struct {
	module uint32 // string id of the module
	pid    uint32 // 0 for files and the kernel
	addr   uint64 // file offset, kernel address, or JIT address
	name   uint32 // JIT function name (JIT addresses are reused over time)
	// mapped is, for JIT code no file named yet, the time its mapping
	// was made: code mapped anew at an address is other code.
	mapped uint64
}

// jitInfo holds the JIT symbol sources of one process.
type jitInfo struct {
	perfMap  *symbolize.PerfMap
	jitDump  *symbolize.JitDump
	lastLoad uint64 // trace time of the last read; 0 before the first
	// uid is who the files must belong to, the process's user, read
	// while the process lives: after its exit it can no longer be asked.
	uid int
	// exited: the process ended, its files are closed, and what they
	// said still names its samples processed late.
	exited bool
}

// unnamedJit is a Location written for JIT code that no perf map or
// jitdump named when it was first sampled. Runtimes may write their
// files later (the JVM's -XX:+DumpPerfMapAtExit at exit): nameLate reads
// them again and renames the location.
type unnamedJit struct {
	key         locKey
	pid         uint32
	addr        uint64
	first, last uint64 // times of its first and last use
}

// lateNames counts what the late reading of JIT files did, for the
// closing message.
type lateNames struct {
	named     int // locations renamed
	unnamed   int // locations no file named
	ambiguous int // locations whose address held other code during their use
}

// jitReload is how often, in trace time, a process's JIT files are reread.
const jitReload = 10_000_000

// resolver turns sampled addresses into trace Locations and StackNodes at
// record time, so that reports work after the binaries are gone.
type resolver struct {
	w      *trace.Writer
	spaces map[uint32]*addrSpace
	// files are the module files opened, by build id (filesByID) or,
	// for files without one, by path.
	files     map[string]*moduleFile
	filesByID map[string]*moduleFile
	locs      map[locKey]uint32
	entry     map[uint32]bool // locations whose function starts a thread
	// calFuncs names, by location id, the hook library's in-run
	// calibration functions (calfit.IsCalibration); "" for the others.
	calFuncs []string
	stacks   map[[2]uint32]uint32
	jit      map[uint32]*jitInfo
	kallsyms *symbolize.Kallsyms
	log      io.Writer
	warned   map[string]bool
	// procRoot prefixes module paths; /proc/PID/root lets the recorder
	// read a target's files through its own mount namespace.
	procRoot func(pid uint32) string

	frames []frameAddr // scratch
	// callGraph is Config.CallGraph; "fp" keeps the kernel's walk.
	callGraph string
	// code, chain and walked serve the unwinder of dwarf and auto, reused
	// from sample to sample.
	code   unwindCode
	chain  []uint64
	walked []unwind.Frame
	// vdso is the recorder's own [vdso], whose CFI describes every
	// target's (symbolize.OpenVDSO); opened at the first need.
	vdso *moduleFile
	// paths are module paths by string id, for fileLocation.
	paths map[uint32]string
	// funcs caches functionLocation; cleared when any mapping changes.
	funcs map[[2]uint64]uint32
	// recent is a direct-mapped cache in front of funcs, cleared with
	// it: the few functions of a dense call load cost a hash lookup
	// each per event otherwise (a tenth of the recorder's CPU).
	recent [256]recentFunc
	// unnamed are the JIT locations still waiting for a name, by id.
	unnamed map[uint32]*unnamedJit
	late    lateNames
	// nextLoc is the last Location id written; ids are not len(locs):
	// a renamed location leaves locs.
	nextLoc uint32
}

type frameAddr struct {
	addr   uint64
	kernel bool
	// exact: addr is not a return address (the leaf, or an instruction a
	// signal interrupted), so it is not moved back into the call.
	exact bool
}

func newResolver(w *trace.Writer, log io.Writer) *resolver {
	r := &resolver{
		w:      w,
		spaces: map[uint32]*addrSpace{},
		files:  map[string]*moduleFile{}, filesByID: map[string]*moduleFile{},
		locs:   map[locKey]uint32{},
		entry:  map[uint32]bool{},
		stacks: map[[2]uint32]uint32{},
		jit:    map[uint32]*jitInfo{},
		paths:  map[uint32]string{},
		funcs:  map[[2]uint64]uint32{},
		log:    log,

		unnamed: map[uint32]*unnamedJit{},
		warned:  map[string]bool{},
		procRoot: func(pid uint32) string {
			return "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/root"
		},
	}
	return r
}

// kernelSymbols loads /proc/kallsyms the first time a kernel address
// needs a name; user-only recordings never pay for it.
func (r *resolver) kernelSymbols() *symbolize.Kallsyms {
	if r.kallsyms == nil && !r.warned["kallsyms"] {
		f, err := os.Open("/proc/kallsyms")
		if err == nil {
			r.kallsyms, err = symbolize.LoadKallsyms(f)
			f.Close()
		}
		if err != nil {
			r.warn("kallsyms", "kernel symbols unavailable: %v", err)
		}
	}
	return r.kallsyms
}

func (r *resolver) warn(key, format string, args ...any) {
	if r.warned[key] {
		return
	}
	r.warned[key] = true
	fmt.Fprintf(r.log, "trueprof: "+format+"\n", args...)
}

func (r *resolver) space(pid uint32) *addrSpace {
	as := r.spaces[pid]
	if as == nil {
		as = &addrSpace{}
		r.spaces[pid] = as
	}
	return as
}

// mmap records an executable mapping.
func (r *resolver) mmap(pid uint32, m mapping) {
	clear(r.funcs)
	clear(r.recent[:])
	r.space(pid).insert(m)
	if jitDumpName.MatchString(filepath.Base(m.path)) {
		// A JIT announces its jitdump file by mapping it (perf's protocol).
		r.openJitDump(pid, m.path)
	}
}

// exec names what it can of the process's old image from its JIT files
// as they are now, then forgets the image.
func (r *resolver) exec(pid uint32) error {
	clear(r.funcs)
	clear(r.recent[:])
	r.spaces[pid] = &addrSpace{}
	err := r.nameLate(pid)
	r.forgetJit(pid)
	return err
}

// closeJit closes a process's JIT symbol files; what they said stays.
func (r *resolver) closeJit(pid uint32) {
	if j := r.jit[pid]; j != nil {
		if j.perfMap != nil {
			j.perfMap.Close()
		}
		if j.jitDump != nil {
			j.jitDump.Close()
		}
		j.exited = true
	}
}

// forgetJit closes and forgets a process's JIT symbol files, and gives up
// on naming its JIT locations: the pid now runs other code.
func (r *resolver) forgetJit(pid uint32) {
	r.closeJit(pid)
	delete(r.jit, pid)
	for id, u := range r.unnamed {
		if u.pid == pid {
			delete(r.unnamed, id)
			r.late.unnamed++
		}
	}
}

// fork gives a new process a copy of its parent's address space.
func (r *resolver) fork(pid, ppid uint32) {
	// A reused pid: the JIT files of the process that had it are not
	// this one's.
	r.forgetJit(pid)
	if as := r.spaces[ppid]; as != nil {
		r.spaces[pid] = as.clone()
	}
}

// exit names the process's JIT code that is still unnamed from its JIT
// files as it left them (runtimes may write them as they exit), then
// closes them. What they said stays, and so does the address space:
// samples of other threads and probe events can be processed after the
// process's exit record (their sources deliver them later than the
// kernel's rings), and must still resolve. A reused pid gets a fresh
// state at its fork or exec.
func (r *resolver) exit(pid uint32) error {
	err := r.nameLate(pid)
	r.closeJit(pid)
	return err
}

// finish names the JIT code still unnamed at the end of recording (at
// detach, the target still running, or for processes whose exit was not
// seen) and says how many JIT addresses the late reading named and how
// many stayed unnamed.
func (r *resolver) finish() error {
	pids := map[uint32]bool{}
	for _, u := range r.unnamed {
		pids[u.pid] = true
	}
	for _, pid := range slices.Sorted(maps.Keys(pids)) {
		if err := r.nameLate(pid); err != nil {
			return err
		}
	}
	l := r.late
	l.unnamed += len(r.unnamed)
	if l.named > 0 {
		fmt.Fprintf(r.log, "trueprof: %d JIT addresses named by perf maps or jitdump files read after their samples\n", l.named)
	}
	if l.unnamed > 0 {
		fmt.Fprintf(r.log, "trueprof: %d JIT addresses stay unnamed ([jit]): no perf map or jitdump names them (docs/recording.md, \"JIT runtimes\", says how to have a runtime write one)\n", l.unnamed)
	}
	if l.ambiguous > 0 {
		fmt.Fprintf(r.log, "trueprof: %d JIT addresses stay unnamed ([jit]): their jitdump shows different code there during their samples\n", l.ambiguous)
	}
	return nil
}

// nameLate reads process pid's JIT files again and renames the locations
// of its JIT code that had no name when first sampled. A jitdump names
// code by the time it was loaded: a location is named only if the same
// code was there at its first and its last use. A perf map has no times
// and holds for the process's life, its latest definition of an address
// winning, as perf report reads it. Locations nothing names stay
// waiting, for a later pass.
func (r *resolver) nameLate(pid uint32) error {
	var ids []uint32
	for id, u := range r.unnamed {
		if u.pid == pid {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids) // the trace's bytes do not depend on map order
	j := r.jitInfo(pid)
	r.loadJit(pid, j)
	for _, id := range ids {
		u := r.unnamed[id]
		fr, start, ok := j.frame(u.addr, u.first)
		if !ok {
			continue
		}
		delete(r.unnamed, id)
		if u.last != u.first {
			if last, lastStart, ok := j.frame(u.addr, u.last); !ok || last.Function != fr.Function || lastStart != start {
				r.late.ambiguous++
				continue
			}
		}
		lines, err := r.lines([]symbolize.Frame{fr})
		if err != nil {
			return err
		}
		if err := r.w.Write(&trace.Rename{ID: id, Lines: lines}); err != nil {
			return err
		}
		// Later uses of the address get a location of their own, from
		// the files as they are then.
		delete(r.locs, u.key)
		r.late.named++
	}
	return nil
}

// threadEntries are the functions where a complete frame-pointer chain
// ends: process and thread start routines of glibc, musl, ld.so and Go.
var threadEntries = map[string]bool{
	"_start": true, "__libc_start_main": true, "__libc_start_call_main": true, "__libc_start_main_impl": true,
	"start_thread": true, "clone": true, "clone3": true, "__clone": true, "__clone3": true,
	"_dl_start": true, "_dl_start_user": true, "_dl_start_final": true, "__start": true,
	"runtime.goexit": true, "runtime.mstart": true, "runtime.mstart0": true, "runtime.rt0_go": true,
	"runtime.goexit.abi0": true, "runtime.mstart.abi0": true, "runtime.rt0_go.abi0": true,
	"runtime.sigtramp": true, "runtime.sigtramp.abi0": true, "_rt0_amd64_linux": true, "_rt0_amd64": true,
}

// maxStack is the kernel's default perf_event_max_stack: a chain this long
// was probably cut.
const maxStack = 127

// stack interns the call chain of a sample and returns its leaf stack
// node, whether the chain looks truncated and, if so, why. With the fp
// call graph the user part is the kernel's frame-pointer walk; otherwise
// it is unwound from the sample's copy of the user stack.
func (r *resolver) stack(s *perf.Record) (uint32, bool, trace.UnwindReason, error) {
	fr := r.frames[:0]
	chain := r.chain[:0]
	unwinding := r.callGraph != callGraphFP && s.UserABI != 0
	kernel := s.KernelIP()
	nKernel := 0
	for _, a := range s.Callchain {
		switch {
		case a == perf.ContextKernel:
			kernel = true
			continue
		case a == perf.ContextUser:
			kernel = false
			continue
		case a >= perf.ContextMax:
			continue
		}
		if kernel {
			nKernel++
		} else if unwinding {
			chain = append(chain, a)
			continue
		}
		fr = append(fr, frameAddr{addr: a, kernel: kernel})
	}
	r.chain = chain
	reason := trace.UnwindNone
	outermost := false // the walk reached a return address the CFI marks undefined
	if unwinding {
		fr, reason, outermost = r.unwindUser(s, fr, chain)
	} else {
		if len(fr) == 0 {
			fr = append(fr, frameAddr{addr: s.IP, kernel: s.KernelIP()})
		}
		fr = r.repairLeaf(s, fr)
		if len(fr) >= maxStack {
			reason = trace.UnwindMaxDepth
		}
	}
	r.frames = fr

	var parent uint32
	user := 0
	var outerUser uint32
	for i := len(fr) - 1; i >= 0; i-- {
		a := fr[i].addr
		if i > 0 && a > 0 && !fr[i].exact {
			// Callers' addresses are return addresses; the call is the
			// instruction before, which matters for inlining and for calls
			// at the very end of a function.
			a--
		}
		loc, err := r.location(s.PID, a, fr[i].kernel, s.Time)
		if err != nil {
			return 0, false, 0, err
		}
		if !fr[i].kernel {
			if user == 0 {
				outerUser = loc
			}
			user++
		}
		key := [2]uint32{parent, loc}
		id, ok := r.stacks[key]
		if !ok {
			id = uint32(len(r.stacks) + 1)
			if err := r.w.Write(&trace.StackNode{ID: id, Parent: parent, Location: loc}); err != nil {
				return 0, false, 0, err
			}
			r.stacks[key] = id
		}
		parent = id
	}
	var truncated bool
	if unwinding {
		// A walk that ended at a return address the CFI marks undefined
		// reached the outermost frame, named or not; one that reached a
		// thread entry is complete even if it could not step past it.
		complete := r.entry[outerUser] || outermost
		truncated = nKernel >= maxStack || reason == trace.UnwindMaxDepth || (user > 0 && !complete)
	} else {
		truncated = len(fr) >= maxStack || (user > 0 && !r.entry[outerUser])
	}
	switch {
	case !truncated:
		reason = trace.UnwindNone
	case reason == trace.UnwindNone && nKernel >= maxStack:
		reason = trace.UnwindMaxDepth
	case reason == trace.UnwindNone:
		reason = trace.UnwindFPEnded
	}
	return parent, truncated, reason, nil
}

// unwindUser appends to fr the user frames unwound from s's stack copy
// and returns why the walk ended, and whether it reached the thread's
// outermost frame. chain is the user part of the kernel's frame-pointer
// walk, which auto splices in. A walk that ends with the kernel's chain
// (trace.UnwindFPEnded) is complete if that chain reached a thread entry:
// its reason is then left to the caller's check.
func (r *resolver) unwindUser(s *perf.Record, fr []frameAddr, chain []uint64) ([]frameAddr, trace.UnwindReason, bool) {
	// UserRegs are BP, SP, IP; UserStack starts at SP.
	regs := unwind.Regs{BP: s.UserRegs[0], SP: s.UserRegs[1], IP: s.UserRegs[2], BPValid: true}
	st := unwind.Stack{SP: regs.SP, Data: s.UserStack, Complete: uint64(len(s.UserStack)) < s.UserStackSize}
	mode := unwind.ModeAuto
	if r.callGraph == callGraphDWARF {
		mode = unwind.ModeDWARF
	}
	r.code = unwindCode{r: r, pid: s.PID, as: r.space(s.PID)}
	walked, reason := unwind.Walk(&r.code, regs, st, chain, mode, r.walked[:0])
	r.walked = walked
	for _, f := range walked {
		fr = append(fr, frameAddr{addr: f.PC, exact: f.Exact})
	}
	if reason == trace.UnwindFPEnded {
		// The kernel's chain decides: complete if it reached an entry.
		return fr, trace.UnwindNone, false
	}
	return fr, reason, reason == trace.UnwindNone
}

// vdsoFile opens the recorder's [vdso] the first time it is needed.
func (r *resolver) vdsoFile() *moduleFile {
	if r.vdso == nil {
		f, err := symbolize.OpenVDSO()
		r.vdso = &moduleFile{f: f, err: err}
		if err != nil {
			r.warn("vdso", "[vdso] frames are followed by frame pointers only: %v", err)
		}
	}
	return r.vdso
}

// unwindCode gives the unwinder the CFI rows of one process's code.
type unwindCode struct {
	r   *resolver
	pid uint32
	as  *addrSpace
}

// Row implements unwind.Code: file code and [vdso] have their .eh_frame
// rows; JIT code and code in files that cannot be read have none and keep
// frame pointers (Go files have no .eh_frame for their Go code).
func (c *unwindCode) Row(pc uint64) (symbolize.UnwindRow, unwind.Kind, error) {
	m := c.as.find(pc)
	if m == nil {
		if c.r.jit[c.pid] != nil {
			return symbolize.UnwindRow{}, unwind.KindFP, symbolize.ErrNoCFI // JIT code mapped unseen
		}
		return symbolize.UnwindRow{}, unwind.KindUnmapped, nil
	}
	if m.path == "[vdso]" {
		if vd := c.r.vdsoFile(); vd.err == nil {
			row, err := vd.f.UnwindRow(pc - m.start + m.pgoff)
			return row, unwind.KindFile, err
		}
	}
	if isAnon(m.path) || isSpecial(m.path) {
		return symbolize.UnwindRow{}, unwind.KindFP, symbolize.ErrNoCFI
	}
	mf := c.r.file(c.pid, m)
	if mf.err != nil {
		return symbolize.UnwindRow{}, unwind.KindFP, symbolize.ErrNoCFI
	}
	row, err := mf.f.UnwindRow(pc - m.start + m.pgoff)
	if err != nil && mf.f.IsGo() {
		return row, unwind.KindFP, err
	}
	return row, unwind.KindFile, err
}

// repairLeaf inserts the caller that a frame-pointer walk skips when the
// innermost user function had no frame of its own at the sampled
// instruction: a frameless leaf (GCC's default for leaves, even with
// -fno-omit-frame-pointer), or any function in its prologue or epilogue.
// There %rbp still holds the caller's frame, so the kernel's walk goes
// from the leaf straight to the caller's caller. The function's CFI says
// where the return address is relative to %rsp, and the sample carries
// the top of the user stack to read it from.
func (r *resolver) repairLeaf(s *perf.Record, fr []frameAddr) []frameAddr {
	if s.UserABI == 0 || len(s.UserStack) == 0 {
		return fr
	}
	u := slices.IndexFunc(fr, func(f frameAddr) bool { return !f.kernel })
	ip := s.UserRegs[2] // UserRegs are BP, SP, IP; UserStack starts at SP
	if u < 0 || fr[u].addr != ip {
		return fr
	}
	as := r.space(s.PID)
	m := as.find(ip)
	if m == nil || isAnon(m.path) || isSpecial(m.path) {
		return fr
	}
	mf := r.file(s.PID, m)
	if mf.err != nil {
		return fr
	}
	rule, ok := mf.f.CFA(ip - m.start + m.pgoff)
	if !ok || rule.Register != dwarfRegSP {
		return fr
	}
	// The return address is saved just below the CFA.
	off := rule.Offset - 8
	if off < 0 || off+8 > int64(len(s.UserStack)) {
		return fr
	}
	ra := binary.LittleEndian.Uint64(s.UserStack[off:])
	if as.find(ra) == nil || (u+1 < len(fr) && fr[u+1].addr == ra) {
		return fr
	}
	return slices.Insert(fr, u+1, frameAddr{addr: ra})
}

// dwarfRegSP is %rsp in the DWARF register numbering of x86-64.
const dwarfRegSP = 7

// location returns the id of the Location for addr in process pid,
// writing it the first time.
func (r *resolver) location(pid uint32, addr uint64, kernel bool, time uint64) (uint32, error) {
	if kernel {
		return r.kernelLocation(addr)
	}
	m := r.space(pid).find(addr)
	if m == nil || isAnon(m.path) {
		return r.jitLocation(pid, addr, time, m)
	}
	if isSpecial(m.path) {
		return r.specialLocation(m.path)
	}
	off := addr - m.start + m.pgoff
	modID, err := r.w.Intern(m.path)
	if err != nil {
		return 0, err
	}
	key := locKey{module: modID, addr: off}
	if id, ok := r.locs[key]; ok {
		return id, nil
	}
	var frames []symbolize.Frame
	if mf := r.file(pid, m); mf.err == nil {
		frames, _ = mf.f.Resolve(off)
		if err := mf.f.DWARFError(); err != nil {
			r.warn("dwarf:"+m.path, "%s: no source lines or inlined frames, its DWARF is unusable: %v", m.path, err)
		}
	}
	if len(frames) == 0 {
		frames = []symbolize.Frame{{Function: fmt.Sprintf("%s+%#x", filepath.Base(m.path), off)}}
	}
	return r.newLocation(key, addr, modID, off, frames)
}

// functionLocation returns the Location of a function's first
// instruction at addr in process pid (a hook's this_fn). Hooks report
// the same few addresses millions of times, so they are cached per
// process until its mappings change.
func (r *resolver) functionLocation(pid uint32, addr, time uint64) (uint32, error) {
	c := &r.recent[(addr>>4^addr>>12)%uint64(len(r.recent))]
	if c.addr == addr && c.pid == pid && c.id != 0 {
		return c.id, nil
	}
	key := [2]uint64{uint64(pid), addr}
	id, ok := r.funcs[key]
	if !ok {
		var err error
		if id, err = r.location(pid, addr, false, time); err != nil {
			return id, err
		}
		r.funcs[key] = id
	}
	*c = recentFunc{pid: pid, id: id, addr: addr}
	return id, nil
}

// recentFunc is an entry of resolver.recent: function address addr of
// process pid has Location id (0: empty).
type recentFunc struct {
	pid, id uint32
	addr    uint64
}

// fileLocation returns the Location of file offset off of the module
// whose path has string id module (a uprobe's function), whichever
// process hit it.
func (r *resolver) fileLocation(pid, module uint32, off uint64) (uint32, error) {
	key := locKey{module: module, addr: off}
	if id, ok := r.locs[key]; ok {
		return id, nil
	}
	path := r.paths[module]
	var frames []symbolize.Frame
	if mf := r.file(pid, &mapping{path: path}); mf.err == nil {
		frames, _ = mf.f.Resolve(off)
	}
	if len(frames) == 0 {
		frames = []symbolize.Frame{{Function: fmt.Sprintf("%s+%#x", filepath.Base(path), off)}}
	}
	return r.newLocation(key, 0, module, off, frames)
}

// intern returns the string id of a module path and remembers the path.
func (r *resolver) intern(path string) (uint32, error) {
	id, err := r.w.Intern(path)
	if err == nil {
		r.paths[id] = path
	}
	return id, err
}

func (r *resolver) kernelLocation(addr uint64) (uint32, error) {
	name, module, ok := "", moduleKernel, false
	if k := r.kernelSymbols(); k != nil {
		name, module, ok = k.Resolve(addr)
	}
	if !ok {
		name, module = moduleKernel, moduleKernel
	}
	modID, err := r.w.Intern(module)
	if err != nil {
		return 0, err
	}
	key := locKey{module: modID, addr: addr}
	if !ok {
		// Without symbols every kernel address would be its own row;
		// one "[kernel.kallsyms]" function groups them instead.
		key.addr = 0
	}
	if id, ok := r.locs[key]; ok {
		return id, nil
	}
	return r.newLocation(key, addr, modID, addr, []symbolize.Frame{{Function: name}})
}

// jitLocation returns the Location of addr in process pid, which no
// file maps: m is its anonymous mapping, or nil if it has none.
func (r *resolver) jitLocation(pid uint32, addr, time uint64, m *mapping) (uint32, error) {
	fr, ok := r.jitFrame(pid, addr, time)
	name := fr.Function
	module := moduleJIT
	if !ok {
		// Unmapped code is one row, as perf's [unknown]: mostly return
		// addresses of broken frame-pointer chains, as many as there
		// are stacks. Anonymous code no JIT described yet is [jit]; its
		// runtime may name it later, so each address keeps its own
		// location until then (unnamedJit).
		name, module = moduleUnknown, moduleUnknown
		if m != nil {
			name = moduleJIT
			module = moduleJIT
		}
	}
	modID, err := r.w.Intern(module)
	if err != nil {
		return 0, err
	}
	nameID, err := r.w.Intern(name)
	if err != nil {
		return 0, err
	}
	key := locKey{module: modID, pid: pid, addr: addr, name: nameID}
	switch {
	case !ok && m == nil:
		key.addr, key.pid = 0, 0
	case !ok:
		key.mapped = m.time
	}
	if id, found := r.locs[key]; found {
		if u := r.unnamed[id]; u != nil {
			u.first, u.last = min(u.first, time), max(u.last, time)
		}
		return id, nil
	}
	fr.Function = name
	id, err := r.newLocation(key, addr, modID, addr, []symbolize.Frame{fr})
	if err == nil && !ok && m != nil {
		r.unnamed[id] = &unnamedJit{key: key, pid: pid, addr: addr, first: time, last: time}
	}
	return id, err
}

func (r *resolver) newLocation(key locKey, addr uint64, modID uint32, off uint64, frames []symbolize.Frame) (uint32, error) {
	id := r.nextLoc + 1
	lines, err := r.lines(frames)
	if err != nil {
		return 0, err
	}
	if err := r.w.Write(&trace.Location{ID: id, Address: addr, Module: modID, Offset: off, Lines: lines}); err != nil {
		return 0, err
	}
	r.nextLoc = id
	r.locs[key] = id
	if fn := frames[len(frames)-1].Function; threadEntries[fn] {
		r.entry[id] = true
	} else if calfit.IsCalibration(fn) {
		r.calFuncs = append(r.calFuncs, make([]string, int(id)+1-len(r.calFuncs))...)
		r.calFuncs[id] = fn
	}
	return id, nil
}

// lines interns the names of frames for a Location or Rename record.
func (r *resolver) lines(frames []symbolize.Frame) ([]trace.Line, error) {
	lines := make([]trace.Line, len(frames))
	for i, f := range frames {
		fn, err := r.w.Intern(f.Function)
		if err != nil {
			return nil, err
		}
		file, err := r.w.Intern(f.File)
		if err != nil {
			return nil, err
		}
		lines[i] = trace.Line{Function: fn, File: file, Line: uint32(max(f.Line, 0))}
	}
	return lines, nil
}

// file opens the module file of m. It prefers the target's own view of the
// path (/proc/PID/root) and refuses a file whose build id differs from the
// one the kernel reported for the mapping: the path may have been replaced,
// and trueprof must never describe one file with another's symbols.
func (r *resolver) file(pid uint32, m *mapping) *moduleFile {
	// A build id names the content: the same library seen through other
	// paths (another mount namespace's /proc/PID/root) is opened once.
	// The unwinder asks for every frame of every sample, so a hit must
	// not allocate: the lookups convert in place.
	byID := len(m.buildID) > 0
	var mf *moduleFile
	var ok bool
	if byID {
		mf, ok = r.filesByID[string(m.buildID)]
	} else {
		mf, ok = r.files[m.path]
	}
	if ok {
		return mf
	}
	mf = &moduleFile{}
	if byID {
		r.filesByID[string(m.buildID)] = mf
	} else {
		r.files[m.path] = mf
	}
	var f *symbolize.File
	var err error
	for _, p := range []string{r.procRoot(pid) + m.path, m.path} {
		if f, err = symbolize.OpenFile(p); err == nil {
			break
		}
	}
	if err != nil {
		mf.err = err
		r.warn("open:"+m.path, "no symbols for %s: %v", m.path, err)
		return mf
	}
	if len(m.buildID) > 0 && len(f.BuildID()) > 0 && !bytes.Equal(m.buildID, f.BuildID()) {
		f.Close()
		mf.err = fmt.Errorf("build id %x of %s does not match the mapped file's %x", f.BuildID(), m.path, m.buildID)
		r.warn("buildid:"+m.path, "no symbols for %s: %v", m.path, mf.err)
		return mf
	}
	mf.f = f
	return mf
}

// isAnon reports whether a mapping path names anonymous memory, where JITs
// put their code.
func isAnon(path string) bool {
	return path == "" || path == "//anon" || strings.HasPrefix(path, "[anon") || strings.HasPrefix(path, "/memfd:")
}

// isSpecial reports whether a mapping is kernel-provided code such as
// [vdso] or [vsyscall].
func isSpecial(path string) bool {
	return strings.HasPrefix(path, "[")
}

// specialLocation groups all samples in a kernel-provided mapping into one
// function named after it.
func (r *resolver) specialLocation(path string) (uint32, error) {
	modID, err := r.w.Intern(path)
	if err != nil {
		return 0, err
	}
	key := locKey{module: modID}
	if id, ok := r.locs[key]; ok {
		return id, nil
	}
	return r.newLocation(key, 0, modID, 0, []symbolize.Frame{{Function: path}})
}

var jitDumpName = regexp.MustCompile(`^jit-[0-9]+\.dump$`)

func (r *resolver) jitInfo(pid uint32) *jitInfo {
	j := r.jit[pid]
	if j == nil {
		j = &jitInfo{uid: ownerUID(pid)}
		r.jit[pid] = j
	}
	return j
}

func (r *resolver) openJitDump(pid uint32, path string) {
	j := r.jitInfo(pid)
	uid := j.uid
	d, err := symbolize.OpenJitDump(r.procRoot(pid)+path, uid)
	if err != nil {
		d, err = symbolize.OpenJitDump(path, uid)
	}
	if err != nil {
		r.warn("jitdump:"+path, "ignoring %s: %v", path, err)
		return
	}
	if d.PID() != int(pid) {
		// The dump describes another process's code.
		d.Close()
		r.warn("jitdump:"+path, "ignoring %s: its header is for pid %d, not %d", path, d.PID(), pid)
		return
	}
	if d.ArchTimestamps() {
		// TSC timestamps cannot be compared with the samples'
		// CLOCK_MONOTONIC ones: names by time would be wrong.
		d.Close()
		r.warn("jitdump:"+path, "ignoring %s: it has TSC timestamps (JITDUMP_FLAGS_ARCH_TIMESTAMP); run the JIT with CLOCK_MONOTONIC timestamps", path)
		return
	}
	if j.jitDump != nil {
		j.jitDump.Close() // the process mapped its dump again
	}
	j.jitDump = d
}

// jitFrame resolves a JIT address through the process's jitdump (by time)
// or perf map. JITs append to these files as they compile, and describe
// code before running it; samples are processed at least reorderSlack
// after they were taken, so files read now describe every sample within
// reorderSlack of this one. They are reread every jitReload of trace time
// whether or not addr is known: a known address may have been reused by
// newer code (jitdump) or redefined (perf map), and a perf map may be
// created after the code first ran.
func (r *resolver) jitFrame(pid uint32, addr, time uint64) (symbolize.Frame, bool) {
	j := r.jitInfo(pid)
	if j.lastLoad == 0 || time-j.lastLoad >= jitReload {
		j.lastLoad = time
		r.loadJit(pid, j)
	}
	fr, _, ok := j.frame(addr, time)
	return fr, ok
}

// frame names the code at addr at time through the jitdump (by time,
// with the source position when the JIT wrote debug info) or else the
// perf map, and returns where that code starts.
func (j *jitInfo) frame(addr, time uint64) (symbolize.Frame, uint64, bool) {
	if j.jitDump != nil {
		if fr, start, ok := j.jitDump.Frame(addr, time); ok {
			return fr, start, true
		}
	}
	if j.perfMap != nil {
		if name, start, ok := j.perfMap.Resolve(addr); ok {
			return symbolize.Frame{Function: name}, start, true
		}
	}
	return symbolize.Frame{}, 0, false
}

// loadJit reads what the process's JIT files gained, opening its perf map
// if it did not exist before; after the process's exit the files are
// closed and what they said is final.
func (r *resolver) loadJit(pid uint32, j *jitInfo) {
	if j.exited {
		return
	}
	if j.jitDump != nil {
		j.jitDump.Update()
	}
	if j.perfMap != nil {
		j.perfMap.Update()
		return
	}
	path := fmt.Sprintf("/tmp/perf-%d.map", pid)
	switch pm, err := symbolize.OpenPerfMap(path, j.uid); {
	case err == nil:
		j.perfMap = pm
	case !os.IsNotExist(err):
		r.warn("perfmap:"+path, "ignoring %s: %v", path, err)
	}
}

// ownerUID returns the uid a process's JIT files must belong to: the
// process's real uid or, once it has exited (the samples of a process
// that lived less than the reorder delay are processed after it ended),
// the recorder's own effective uid: a file of the user running the
// recorder is as trustworthy as the recorder itself.
func ownerUID(pid uint32) int {
	if uid, err := processUID(pid); err == nil {
		return uid
	}
	return os.Geteuid()
}

// processUID returns the real uid owning process pid.
func processUID(pid uint32) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
	}
	return 0, fmt.Errorf("no Uid in /proc/%d/status", pid)
}

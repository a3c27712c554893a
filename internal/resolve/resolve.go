package resolve

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"trueprof/internal/calibrate/calfit"

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

// Resolver turns sampled addresses into trace Locations and StackNodes at
// record time, so that reports work after the binaries are gone. It is fed
// the process events of the time-ordered record stream (Mmap, Fork, Exec,
// Exit) and is not safe for concurrent use.
type Resolver struct {
	w      *trace.Writer
	spaces map[uint32]*addrSpace
	// files are the module files opened, by build id (filesByID) or,
	// for files without one, by path.
	files     map[string]*moduleFile
	filesByID map[string]*moduleFile
	locs      map[locKey]uint32
	entry     map[uint32]bool // locations whose function starts a thread
	// calFuncs are, by location id, the hook library's in-run
	// calibration functions (calfit.IsCalibration), their names parsed
	// once; nil for the others.
	calFuncs []*calfit.Function
	stacks   map[[2]uint32]uint32
	jit      map[uint32]*jitInfo
	kallsyms *symbolize.Kallsyms
	log      io.Writer
	warned   map[string]bool
	// procRoot prefixes module paths; /proc/PID/root lets the recorder
	// read a target's files through its own mount namespace.
	procRoot func(pid uint32) string

	frames []frameAddr // scratch
	opts   Options
	// code, chain and walked serve the unwinder of dwarf and auto, reused
	// from sample to sample.
	code   unwindCode
	chain  []uint64
	walked []unwind.Frame
	// vdso is the recorder's own [vdso], whose CFI describes every
	// target's (symbolize.OpenVDSO); opened at the first need.
	vdso *moduleFile
	// paths are module paths by string id, for FileLocation.
	paths map[uint32]string
	// funcs caches FunctionLocation; cleared when any mapping changes.
	funcs map[[2]uint64]uint32
	// lastImage is the time of the latest image replaced (an exec, a
	// reused pid): an event stamped before it may be of an image
	// replaced since, which the caches do not tell apart, and is looked
	// up without them.
	lastImage uint64
	// recent is a direct-mapped cache in front of funcs, cleared with
	// it: the functions of a dense call load cost a hash lookup each
	// per event otherwise (a tenth of the recorder's CPU). Its 4,096
	// entries (64 KiB) hold a real program's hot functions: with 256,
	// a load calling 1,000 functions in turn missed at most events
	// (BenchmarkMergeEvents/functions=1000: 20.7 ns an event with 256
	// entries, 9.2 with 4,096).
	recent [4096]recentFunc
	// unnamed are the JIT locations still waiting for a name, by id.
	unnamed map[uint32]*unnamedJit
	late    lateNames
	// nextLoc is the last Location id written; ids are not len(locs):
	// a renamed location leaves locs.
	nextLoc uint32
}

// Options say how a Resolver builds the user part of a sample's stack.
type Options struct {
	// Unwind walks each sample's copy of the user stack with the
	// modules' CFI (call graphs dwarf and auto); false keeps the
	// kernel's frame-pointer chain (fp), repairing only its leaf.
	Unwind bool
	// Mode is how the walk crosses code without CFI when Unwind is set.
	Mode unwind.Mode
}

// New returns a Resolver writing its Location, StackNode and Rename
// records and their strings to w, and its warnings (each once) to log.
func New(w *trace.Writer, log io.Writer, opts Options) *Resolver {
	r := &Resolver{
		opts:   opts,
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
func (r *Resolver) kernelSymbols() *symbolize.Kallsyms {
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

func (r *Resolver) warn(key, format string, args ...any) {
	if r.warned[key] {
		return
	}
	r.warned[key] = true
	fmt.Fprintf(r.log, "trueprof: "+format+"\n", args...)
}

func (r *Resolver) space(pid uint32) *addrSpace {
	as := r.spaces[pid]
	if as == nil {
		as = &addrSpace{}
		r.spaces[pid] = as
	}
	return as
}

// Mmap records an executable mapping of process pid, made at m.Time; it
// replaces whatever part of older mappings it overlaps.
func (r *Resolver) Mmap(pid uint32, m Mapping) {
	clear(r.funcs)
	clear(r.recent[:])
	r.space(pid).insert(m)
	if jitDumpName.MatchString(filepath.Base(m.Path)) {
		// A JIT announces its jitdump file by mapping it (perf's protocol).
		r.openJitDump(pid, m.Path)
	}
}

// Exec names what it can of the process's old image from its JIT files
// as they are now and starts its new image at time: addresses of events
// stamped earlier still resolve in the old one.
func (r *Resolver) Exec(pid uint32, time uint64) error {
	clear(r.funcs)
	clear(r.recent[:])
	r.spaces[pid] = r.space(pid).replace(&addrSpace{}, time)
	r.lastImage = max(r.lastImage, time)
	err := r.nameLate(pid)
	r.forgetJit(pid)
	return err
}

// Fork gives a new process, made at time, a copy of its parent's
// address space. A pid in use before is another process's: its image
// is kept for its events stamped earlier, as at an exec.
func (r *Resolver) Fork(pid, ppid uint32, time uint64) {
	// A reused pid: the JIT files of the process that had it are not
	// this one's.
	r.forgetJit(pid)
	as := &addrSpace{}
	if p := r.spaces[ppid]; p != nil {
		as = p.clone()
	}
	if old := r.spaces[pid]; old != nil {
		clear(r.funcs)
		clear(r.recent[:])
		as = old.replace(as, time)
		r.lastImage = max(r.lastImage, time)
	}
	r.spaces[pid] = as
}

// Exit names the process's JIT code that is still unnamed from its JIT
// files as it left them (runtimes may write them as they exit), then
// closes them. What they said stays, and so does the address space:
// samples of other threads and probe events can be processed after the
// process's exit record (their sources deliver them later than the
// kernel's rings), and must still resolve. A reused pid gets a fresh
// state at its fork or exec.
func (r *Resolver) Exit(pid uint32) error {
	err := r.nameLate(pid)
	r.closeJit(pid)
	return err
}

// Finish names the JIT code still unnamed at the end of recording (at
// detach, the target still running, or for processes whose exit was not
// seen) and says how many JIT addresses the late reading named and how
// many stayed unnamed.
func (r *Resolver) Finish() error {
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

// location returns the id of the Location for addr in process pid,
// writing it the first time.
func (r *Resolver) location(pid uint32, addr uint64, kernel bool, time uint64) (uint32, error) {
	if kernel {
		return r.kernelLocation(addr)
	}
	m := r.space(pid).at(time).find(addr)
	if m == nil || isAnon(m.Path) {
		return r.jitLocation(pid, addr, time, m)
	}
	if isSpecial(m.Path) {
		return r.specialLocation(m.Path)
	}
	off := addr - m.Start + m.PgOff
	modID, err := r.w.Intern(m.Path)
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
			r.warn("dwarf:"+m.Path, "%s: no source lines or inlined frames, its DWARF is unusable: %v", m.Path, err)
		}
	}
	if len(frames) == 0 {
		frames = []symbolize.Frame{{Function: fmt.Sprintf("%s+%#x", filepath.Base(m.Path), off)}}
	}
	return r.newLocation(key, addr, modID, off, frames)
}

// FunctionLocation returns the Location of a function's first
// instruction at addr in process pid (a hook's this_fn). Hooks report
// the same few addresses millions of times, so they are cached per
// process until its mappings change.
func (r *Resolver) FunctionLocation(pid uint32, addr, time uint64) (uint32, error) {
	if id, ok := r.RecentFunction(pid, addr, time); ok {
		return id, nil
	}
	if time < r.lastImage {
		// Perhaps of an image replaced since: the caches, by process
		// and address, hold the current images' functions.
		return r.location(pid, addr, false, time)
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
	*r.recentEntry(addr) = recentFunc{pid: pid, id: id, addr: addr}
	return id, nil
}

// RecentFunction is FunctionLocation's answer if it is in its cache of
// recent functions, which holds nearly every event of a call load: a
// lookup small enough to be inlined into the recorder's per-event loop,
// which calls FunctionLocation only when it reports false.
func (r *Resolver) RecentFunction(pid uint32, addr, time uint64) (uint32, bool) {
	c := r.recentEntry(addr)
	return c.id, c.addr == addr && c.pid == pid && c.id != 0 && time >= r.lastImage
}

// recentEntry is the entry of the recent cache that addr maps to.
func (r *Resolver) recentEntry(addr uint64) *recentFunc {
	return &r.recent[(addr>>4^addr>>12)%uint64(len(r.recent))]
}

// recentFunc is an entry of Resolver.recent: function address addr of
// process pid has Location id (0: empty).
type recentFunc struct {
	pid, id uint32
	addr    uint64
}

// FileLocation returns the Location of file offset off of the module
// whose path has string id module (a uprobe's function), whichever
// process hit it.
func (r *Resolver) FileLocation(pid, module uint32, off uint64) (uint32, error) {
	key := locKey{module: module, addr: off}
	if id, ok := r.locs[key]; ok {
		return id, nil
	}
	path := r.paths[module]
	var frames []symbolize.Frame
	if mf := r.file(pid, &Mapping{Path: path}); mf.err == nil {
		frames, _ = mf.f.Resolve(off)
	}
	if len(frames) == 0 {
		frames = []symbolize.Frame{{Function: fmt.Sprintf("%s+%#x", filepath.Base(path), off)}}
	}
	return r.newLocation(key, 0, module, off, frames)
}

// Module returns the string id of a module path, for FileLocation.
func (r *Resolver) Module(path string) (uint32, error) {
	id, err := r.w.Intern(path)
	if err == nil {
		r.paths[id] = path
	}
	return id, err
}

func (r *Resolver) kernelLocation(addr uint64) (uint32, error) {
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

// CalibrationFunction returns the function at location id when it is
// one of the hook library's in-run calibration functions
// (calfit.IsCalibration), else nil. It is cheap enough for every event.
func (r *Resolver) CalibrationFunction(id uint32) *calfit.Function {
	if int(id) < len(r.calFuncs) {
		return r.calFuncs[id]
	}
	return nil
}

func (r *Resolver) newLocation(key locKey, addr uint64, modID uint32, off uint64, frames []symbolize.Frame) (uint32, error) {
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
		r.calFuncs = append(r.calFuncs, make([]*calfit.Function, int(id)+1-len(r.calFuncs))...)
		r.calFuncs[id] = calfit.NewFunction(fn)
	}
	return id, nil
}

// lines interns the names of frames for a Location or Rename record.
func (r *Resolver) lines(frames []symbolize.Frame) ([]trace.Line, error) {
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

// specialLocation groups all samples in a kernel-provided mapping into one
// function named after it.
func (r *Resolver) specialLocation(path string) (uint32, error) {
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

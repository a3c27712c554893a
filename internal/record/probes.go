package record

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"trueprof/internal/hook"
	"trueprof/internal/perf"
	"trueprof/internal/resolve"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// instrumentation is how a recording probes functions, decided before the
// target starts.
type instrumentation struct {
	mech     string // "hook" or "uprobe"
	path     string // the executable
	region   *hook.Region
	patterns []string
	// modules are the files to probe when the target starts: the
	// executable and the libraries it needs, with their sites.
	modules []plannedModule
	// done lists the files already planned (by resolved path), so a
	// library mapped later (dlopen) is probed once.
	done map[string]bool
	log  io.Writer // warnings
	// root is --root's function: probed first, its callees as they run.
	root   string
	probed map[[2]uint64]probedFunc // by module string id and file offset
	graphs map[string]*callGraph
	named  map[string]bool // path + NUL + function already probed
}

// plannedModule is a file and the probe sites placed in it.
type plannedModule struct {
	path  string
	sites []uprobe.Site
}

// planInstrumentation chooses the mechanism and prepares it: hooks when
// the target was built with -finstrument-functions (and --mech allows),
// uprobes otherwise and always when attaching.
func (s *session) planInstrumentation(pid int) (*instrumentation, launchOptions, error) {
	cfg := s.cfg
	in := &instrumentation{mech: cfg.Mech, log: s.log}
	var lo launchOptions
	var err error
	if in.path, err = targetPath(cfg.Command, pid); err != nil {
		return nil, lo, err
	}
	if len(cfg.Command) == 0 {
		if in.mech == "hook" {
			return nil, lo, errors.New("--mech hook needs a launched command: hooks are loaded at exec; attach with uprobes")
		}
		in.mech = "uprobe"
	}
	if in.mech == "" || in.mech == "hook" {
		ok, err := hook.Instrumented(in.path)
		switch {
		case err != nil && in.mech == "hook":
			return nil, lo, err
		case ok:
			in.mech = "hook"
		case in.mech == "hook":
			return nil, lo, fmt.Errorf("--mech hook: %s was not built with -finstrument-functions", in.path)
		default:
			in.mech = "uprobe"
		}
	}
	switch in.mech {
	case "hook":
		r, err := hook.NewRegion(hook.Options{})
		if err != nil {
			return nil, lo, err
		}
		in.region = r
		lo.files = []*os.File{r.File()}
		// The wrapper has the gate on descriptor 3; extra files follow.
		lo.env = r.Env(4)
		if cfg.CalibrateInRun {
			lo.env = append(lo.env, hook.EnvCalibrate+"=1")
		}
	case "uprobe":
		in.patterns = cfg.Trace
		if cfg.Root != "" {
			in.patterns = append(in.patterns, cfg.Root)
			in.root = cfg.Root
			in.probed = map[[2]uint64]probedFunc{}
			in.graphs = map[string]*callGraph{}
			in.named = map[string]bool{}
		}
		if len(in.patterns) == 0 {
			return nil, lo, errors.New("uprobes need --trace patterns (or --root): probing every function of an unmodified binary is what sampling is for")
		}
		in.done = map[string]bool{}
		// The executable and the libraries it needs are probed before it
		// runs; libraries loaded later are probed when they are mapped.
		files := append([]string{in.path}, neededLibraries(in.path)...)
		if len(cfg.Command) == 0 {
			// A running process may have loaded more than it needs.
			files = append(files, mappedFiles(pid)...)
		}
		for _, f := range files {
			sites, err := in.plan(f)
			if err != nil {
				return nil, lo, err
			}
			if len(sites) > 0 {
				in.modules = append(in.modules, plannedModule{path: f, sites: sites})
			}
		}
		if len(in.modules) == 0 && !namesOtherModules(in.patterns, in.path) {
			return nil, lo, fmt.Errorf("no function of %s or its libraries matches %q", in.path, in.patterns)
		}
	}
	return in, lo, nil
}

// startInstrumentation places the probes once the target process exists
// (launched: stopped before exec) and records which functions were probed.
// No event counts before every probe is in place: a thread inside a call
// that was entered while the probes were being placed would otherwise see
// the call's entry but never its exit, and every later call nest under it.
func (s *session) startInstrumentation(in *instrumentation, pid int, launched bool) error {
	switch in.mech {
	case "hook":
		h, err := newHookSource(in.region)
		if err != nil {
			return err
		}
		s.sources = append(s.sources, h)
	case "uprobe":
		var placed []*uprobeSource
		var live uint64
		for _, m := range in.modules {
			u, err := s.placeModule(pid, m, launched, false)
			if err != nil {
				return err
			}
			placed = append(placed, u)
			live = max(live, u.set.Live())
		}
		for _, u := range placed {
			if err := s.accept(u, live); err != nil {
				return err
			}
		}
	}
	return nil
}

// attachModule places a module's probes on a running pid and counts
// their events from the moment all of them are in place; lazy marks
// probes placed by --root's expansion.
func (s *session) attachModule(pid int, m plannedModule, lazy bool) error {
	if s.detached != 0 {
		return nil // recording is stopping: the probes would count nothing
	}
	u, err := s.placeModule(pid, m, false, lazy)
	if err != nil {
		return err
	}
	return s.accept(u, u.set.Live())
}

// placeModule places a planned module's probes on pid and adds their
// source, which counts nothing until accept; lazy marks probes placed by
// --root's expansion.
func (s *session) placeModule(pid int, m plannedModule, launched, lazy bool) (*uprobeSource, error) {
	set, err := uprobe.Attach(pid, m.path, m.sites, launched)
	if err != nil {
		return nil, err
	}
	starts := fileOffsets(m.sites)
	module, err := s.res.Module(m.path)
	if err != nil {
		set.Close()
		return nil, err
	}
	u := &uprobeSource{set: set, starts: starts, module: module, from: math.MaxUint64, end: math.MaxUint64}
	s.sources = append(s.sources, u)
	for i, site := range m.sites {
		fn, err := s.res.FileLocation(uint32(pid), module, starts[i])
		if err != nil {
			return nil, err
		}
		mech := trace.ProbeEntry
		switch {
		case lazy:
			mech = trace.ProbeDynamic
		case len(site.Exits) > 0:
			mech = trace.ProbeRetInsn
		case site.Return:
			mech = trace.ProbeReturn
		}
		u.probes = append(u.probes, trace.Probe{PID: uint32(pid), Function: fn, Address: site.Start, Mech: mech, Stepped: !site.Emulated})
		if in := s.instr; in != nil && in.root != "" {
			in.probed[[2]uint64{uint64(module), starts[i]}] = probedFunc{path: m.path, vaddr: site.Start, name: site.Function}
		}
	}
	return u, nil
}

// accept makes u count the events from time from on, when its probes
// (and the others placed with them) were all in place, and writes the
// Probe records that say so.
func (s *session) accept(u *uprobeSource, from uint64) error {
	u.from = from
	for i := range u.probes {
		u.probes[i].Time = from
		if err := s.w.Write(&u.probes[i]); err != nil {
			return err
		}
	}
	u.probes = nil
	return nil
}

// detach removes the probes when recording stops and returns the detach
// time, 0 when no function was probed. Events count until then: an exit
// after it may be of a call whose entry came after it too (a return
// probe still catches the calls entered while the entry probes come off),
// so the calls still open then end there. Hooks cannot be removed: their
// detach time is when their last events were collected.
func (s *session) detach() uint64 {
	t := perf.Now()
	for _, src := range s.sources {
		if u, ok := src.(*uprobeSource); ok {
			u.end = t
		}
		src.finish()
	}
	switch {
	case s.instr == nil:
		return 0
	case s.instr.mech == "hook":
		return perf.Now()
	}
	return t
}

// probedFunc is a probed function, for --root's expansion.
type probedFunc struct {
	path     string
	vaddr    uint64
	name     string
	expanded bool
}

// expand probes the direct callees of a function the first time it runs
// under --root (Scheme B). Their first calls happen before the probes are
// placed and are not seen; later calls are counted, and the Probe records
// say from when.
func (s *session) expand(pid, module uint32, off uint64) error {
	in := s.instr
	key := [2]uint64{uint64(module), off}
	pf, ok := in.probed[key]
	if !ok || pf.expanded {
		return nil
	}
	pf.expanded = true
	in.probed[key] = pf
	g := in.graphs[pf.path]
	if g == nil {
		var err error
		if g, err = openCallGraph(pf.path); err != nil {
			return nil
		}
		in.graphs[pf.path] = g
	}
	var names []string
	for _, name := range g.callees(pf.vaddr) {
		// Names with glob metacharacters (C++ operators) cannot be
		// given to the planner as exact patterns.
		if !strings.ContainsAny(name, "*?[]\\") && !in.named[pf.path+"\x00"+name] {
			in.named[pf.path+"\x00"+name] = true
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sites, err := uprobe.Plan(pf.path, names)
	var skip *uprobe.SkipError
	if err != nil && !errors.As(err, &skip) {
		return nil
	}
	if len(sites) == 0 {
		return nil
	}
	if err := s.attachModule(int(pid), plannedModule{path: pf.path, sites: sites}, true); err != nil {
		fmt.Fprintf(s.log, "trueprof: --root: probing the callees of %s: %v\n", pf.name, err)
	}
	return nil
}

// moduleMapped probes a library the target mapped while running (dlopen)
// if the patterns name functions in it. Calls made between the mapping and
// the probes' placement, a few milliseconds, are not seen: the Probe
// records say from when each function was counted.
func (s *session) moduleMapped(pid uint32, path string) error {
	in := s.instr
	if in == nil || in.mech != "uprobe" || !resolve.IsFile(path) {
		return nil
	}
	sites, err := in.plan(path)
	if err != nil || len(sites) == 0 {
		// A library that cannot be read is not a reason to stop recording.
		return nil
	}
	if err := s.attachModule(int(pid), plannedModule{path: path, sites: sites}, false); err != nil {
		fmt.Fprintf(s.log, "trueprof: probing %s: %v\n", path, err)
	}
	return nil
}

// plan returns the probe sites of the patterns in file, once per file:
// files are known by absolute, resolved path, which is how the kernel
// names the mappings that come later.
func (in *instrumentation) plan(file string) ([]uprobe.Site, error) {
	key, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	if r, err := filepath.EvalSymlinks(key); err == nil {
		key = r
	}
	if in.done[key] {
		return nil, nil
	}
	in.done[key] = true
	sites, err := uprobe.Plan(file, in.patterns)
	var skip *uprobe.SkipError
	switch {
	case errors.Is(err, uprobe.ErrNoMatch), errors.Is(err, uprobe.ErrStripped) && file != in.path:
		return nil, nil
	case errors.As(err, &skip):
		// Functions the planner cannot probe safely are left out, and
		// said so: they will be missing from the report.
		fmt.Fprintf(in.log, "trueprof: not probed: %v\n", skip)
		return sites, nil
	}
	return sites, err
}

// namesOtherModules reports whether a pattern is qualified by a module
// other than the executable: a library the program may load later.
func namesOtherModules(patterns []string, exe string) bool {
	for _, p := range patterns {
		if mod, _, ok := strings.Cut(p, ":"); ok && !strings.HasPrefix(p[len(mod):], "::") && mod != filepath.Base(exe) {
			return true
		}
	}
	return false
}

// neededLibraries returns the paths of the shared libraries path needs
// directly (DT_NEEDED), found as the dynamic loader would: RPATH or
// RUNPATH, LD_LIBRARY_PATH, then the system directories. Libraries it
// cannot find are probed when mapped.
func neededLibraries(path string) []string {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil
	}
	var dirs []string
	origin := filepath.Dir(path)
	for _, tag := range []elf.DynTag{elf.DT_RPATH, elf.DT_RUNPATH} {
		if v, err := f.DynString(tag); err == nil {
			for _, entry := range v {
				for _, d := range strings.Split(entry, ":") {
					dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", origin))
				}
			}
		}
	}
	dirs = append(dirs, filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
	dirs = append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	var out []string
	for _, lib := range libs {
		if strings.Contains(lib, "/") {
			out = append(out, lib)
			continue
		}
		for _, d := range dirs {
			if d == "" {
				continue
			}
			if p := filepath.Join(d, lib); fileExists(p) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// mappedFiles lists the files process pid has mapped executable.
func mappedFiles(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := resolve.ParseMapsLine(line); ok && strings.HasPrefix(m.Path, "/") {
			out = append(out, m.Path)
		}
	}
	return out
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// uprobeSource reads the events of a set of uprobes.
type uprobeSource struct {
	set    *uprobe.Set
	starts []uint64 // file offset of each site's function start
	module uint32   // string id of the probed file's path
	// Events count from when every probe was in place (from; until
	// accept, math.MaxUint64) until the detach began (end): every entry
	// counted then has its exit counted, or its call is open at end.
	// probes are the Probe records accept writes.
	from, end uint64
	probes    []trace.Probe
}

func (u *uprobeSource) fds() []int { return u.set.Fds() }

// drain passes the events that count. Exits of calls entered before
// from pass too; the analysis ignores an exit with no open call.
func (u *uprobeSource) drain(fn func(instrEvent)) {
	u.set.Read(func(e uprobe.Event) {
		if e.Time < u.from || e.Time >= u.end {
			return
		}
		kind := trace.EventExit
		if e.Entry {
			kind = trace.EventEntry
		}
		fn(instrEvent{time: e.Time, pid: e.PID, tid: e.TID, kind: kind, module: u.module, addr: u.starts[e.Site]})
	})
}

// finish removes the probes; the events they wrote stay to be drained.
func (u *uprobeSource) finish() { u.set.Detach() }

func (u *uprobeSource) lost() uint64 { return u.set.Lost() }
func (u *uprobeSource) close() error { return u.set.Close() }

// fileOffsets returns the file offsets of the sites' functions, which is
// how the resolver names code: an event names the function's first
// instruction, wherever its probe sits.
func fileOffsets(sites []uprobe.Site) []uint64 {
	out := make([]uint64, len(sites))
	for i, s := range sites {
		out[i] = s.StartOffset
	}
	return out
}

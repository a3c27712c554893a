package record

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"trueprof/internal/control"
	"trueprof/internal/resolve"
	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// planner places probes as the recording learns what the target runs.
// The data path (session.process, session.processEvent) reports what it
// sees to it and never places a probe itself: deciding what to probe and
// attaching it are the planner's alone.
type planner interface {
	// moduleMapped reports that process pid mapped file path executable
	// at time (a library loaded with dlopen, or the executable at exec).
	moduleMapped(pid uint32, path string, time uint64) error
	// entered reports that a probed function ran in pid at time: the
	// function at file offset off of module (the string id of its path).
	entered(pid, module uint32, off, time uint64) error
	// stop ends placing: recording is stopping, and probes placed now
	// would count nothing.
	stop()
	// close releases what the planner holds; the probes it placed are
	// event sources of the session, removed with them.
	close()
}

// attachUprobes places uprobes: uprobe.Attach, which only the uprobe
// planner calls (tests replace it to see who does), and attachLoaded the
// same with the BPF side loaded beforehand (uprobe.AttachLoaded).
var (
	attachUprobes = uprobe.Attach
	attachLoaded  = uprobe.AttachLoaded
)

// uprobePlanner plans and places uprobes: the functions that match the
// patterns, in the executable and the libraries it needs when the target
// starts, in libraries as they are mapped, and with --root the direct
// callees of each function of the root's subgraph when it first runs
// (Scheme B), the target held meanwhile (lazy.go).
type uprobePlanner struct {
	path     string // the executable
	patterns []string
	// modules are the files to probe when the target starts: the
	// executable and the libraries it needs, with their sites.
	modules []plannedModule
	// done lists the files already planned (by resolved path), so a
	// library mapped later (dlopen) is probed once.
	done map[string]bool
	log  io.Writer // warnings
	// root is --root's function: probed first, its callees as they run.
	// probed are the functions of its subgraph probed so far.
	root   string
	probed map[liveKey]probedFunc
	graphs map[string]*callGraph
	named  map[string]bool // path + NUL + function already probed
	// held are the entries that stopped the target, not yet released
	// (lazy.go); holds counts the holds, heldNS their time.
	held   []heldEntry
	holds  int
	heldNS uint64
	// spare is the BPF side of the next set --root's expansion places,
	// loaded outside the holds (refill): most of what placing costs.
	spare *uprobe.Loaded
	// What placing needs from the session, from start on: names of files
	// and functions, the trace for Probe records, the watch of the waits
	// placing causes, and the loop's sources.
	res       *resolve.Resolver
	w         *trace.Writer
	pauses    *pauseWatch
	addSource func(eventSource)
	stopped   bool
	// live are the functions probed now, by module string id and file
	// offset: what trace-remove finds and trace-add leaves alone.
	live map[liveKey]liveProbe
}

// plannedModule is a file and the probe sites placed in it; root marks
// sites of the root function's subgraph (the root, its lazy callees),
// which a new root replaces.
type plannedModule struct {
	path  string
	sites []uprobe.Site
	root  bool
}

// liveKey names a probed function: its module's string id and its file
// offset.
type liveKey struct {
	module uint32
	off    uint64
}

// liveProbe is a function probed now: its source and site there, its
// Probe record and the file it is in.
type liveProbe struct {
	src   *uprobeSource
	site  int
	probe trace.Probe
	path  string
	name  string
	root  bool
}

// probedFunc is a probed function of the root's subgraph, for --root's
// expansion.
type probedFunc struct {
	path     string
	vaddr    uint64
	name     string
	expanded bool
}

// newUprobePlanner plans the probes of cfg's patterns in the executable
// of cfg's command or of process pid, and in the libraries it needs (a
// running process's mapped files too), before the target runs.
func newUprobePlanner(cfg Config, pid int, log io.Writer) (*uprobePlanner, error) {
	p, err := newPlanner(cfg.Command, pid, log)
	if err != nil {
		return nil, err
	}
	p.patterns = slices.Clone(cfg.Trace)
	if cfg.Root != "" {
		p.patterns = append(p.patterns, cfg.Root)
		p.setRoot(cfg.Root)
	}
	// The executable and the libraries it needs are probed before it
	// runs, found as ld.so will find them in the environment the command
	// inherits; libraries loaded later are probed when they are mapped.
	// A running process has loaded what it needs, and maybe more: its
	// mappings are the loader's own choice, and no path of its
	// environment is followed.
	files := []string{p.path}
	if len(cfg.Command) > 0 {
		files = append(files, neededLibraries(p.path, os.Environ())...)
	} else {
		files = append(files, mappedFiles(pid)...)
	}
	for _, f := range files {
		sites, err := p.plan(f)
		if err != nil {
			return nil, err
		}
		if len(sites) > 0 {
			p.modules = append(p.modules, plannedModule{path: f, sites: sites})
		}
	}
	if len(p.modules) == 0 && !namesOtherModules(p.patterns, p.path) {
		return nil, fmt.Errorf("no function of %s or its libraries matches %q", p.path, p.patterns)
	}
	return p, nil
}

// newPlanner returns a planner of the executable of command or of
// process pid with nothing planned.
func newPlanner(command []string, pid int, log io.Writer) (*uprobePlanner, error) {
	path, err := targetPath(command, pid)
	if err != nil {
		return nil, err
	}
	return &uprobePlanner{path: path, done: map[string]bool{}, log: log, live: map[liveKey]liveProbe{}}, nil
}

// setRoot makes fn the root function whose callees are probed as they
// first run.
func (p *uprobePlanner) setRoot(fn string) {
	p.root = fn
	p.probed = map[liveKey]probedFunc{}
	if p.graphs == nil {
		p.graphs = map[string]*callGraph{}
	}
	p.named = map[string]bool{}
}

// start places the planned probes once the target process exists
// (launched: stopped before exec) and records which functions were
// probed. No event counts before every probe is in place: a thread
// inside a call that was entered while the probes were being placed
// would otherwise see the call's entry but never its exit, and every
// later call nest under it.
func (p *uprobePlanner) start(pid int, launched bool, res *resolve.Resolver, w *trace.Writer, pauses *pauseWatch, addSource func(eventSource)) error {
	p.res, p.w, p.pauses, p.addSource = res, w, pauses, addSource
	if !launched {
		// A launched target waits in the exec wrapper; a running one
		// waits for its mm's lock while the probes go in.
		defer p.pauses.placing()()
	}
	var placed []*uprobeSource
	var live uint64
	for _, m := range p.modules {
		u, err := p.placeModule(pid, m, false)
		if err != nil {
			return err
		}
		if u != nil {
			placed = append(placed, u)
			live = max(live, u.set.Live())
		}
	}
	for _, u := range placed {
		if err := p.accept(u, live); err != nil {
			return err
		}
	}
	p.watchLoads(pid)
	p.refill()
	return nil
}

// linkerNotice is the function the dynamic linker calls when its list of
// loaded objects changes (r_debug.r_brk, where debuggers break): with
// r_state RT_ADD before dlopen maps a library, and RT_CONSISTENT once it
// and its dependencies are mapped, before they are relocated and their
// constructors run; likewise around dlclose, and once at start.
const linkerNotice = "_dl_debug_state"

// watchLoads makes the dynamic linker hold the target at every
// linkerNotice while recording, when the patterns can name functions of
// libraries loaded later: a library dlopen maps is then probed before any
// of its code runs, its constructors included, and every call of it is
// counted (releaseHolds). Without the watch (a static executable, a
// dynamic linker without the symbol) such a library is probed when its
// mapping is seen, a few milliseconds later, and says so.
func (p *uprobePlanner) watchLoads(pid int) {
	if !reachesLoads(p.patterns, p.path) {
		return
	}
	exe, err := symbolize.OpenFileOptions(p.path, symbolize.Options{NoDebugFile: true})
	if err != nil {
		return
	}
	ld := exe.Interpreter()
	exe.Close()
	if ld == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintf(p.log, "trueprof: not watching %s for libraries loaded later (their first calls may be missed): %v\n", ld, err)
	}
	sites, err := uprobe.Plan(ld, []string{linkerNotice})
	if err != nil && !errors.As(err, new(*uprobe.SkipError)) {
		fail(err)
		return
	}
	i := slices.IndexFunc(sites, func(s uprobe.Site) bool { return s.Function == linkerNotice })
	if i < 0 {
		fail(fmt.Errorf("%s cannot be probed", linkerNotice))
		return
	}
	// Its entry alone, which holds: no call of it is counted.
	site := sites[i]
	site.Exits, site.Return, site.Calls, site.Hold = nil, false, nil, true
	module, err := p.res.Module(ld)
	if err != nil {
		fail(err)
		return
	}
	set, err := attachUprobes(pid, ld, []uprobe.Site{site})
	if err != nil {
		fail(err)
		return
	}
	// from and end at their maximum: the source passes no event, and
	// writes no Probe record.
	p.addSource(&uprobeSource{set: set, starts: []uint64{site.StartOffset}, module: module,
		from: math.MaxUint64, end: math.MaxUint64, points: 1, onHold: p.onLoad})
}

// moduleMapped probes a library the target mapped while running (dlopen)
// if the patterns name functions in it. A library the load watch held
// the target for is probed already (watchLoads); otherwise calls made
// between the mapping and the probes' placement, a few milliseconds, are
// not seen: the Probe records say from when each function was counted.
func (p *uprobePlanner) moduleMapped(pid uint32, path string, _ uint64) error {
	if !resolve.IsFile(path) {
		return nil
	}
	sites, err := p.plan(path)
	if err != nil || len(sites) == 0 {
		// A library that cannot be read is not a reason to stop recording.
		return nil
	}
	if err := p.attachModule(int(pid), plannedModule{path: path, sites: sites}, false); err != nil {
		fmt.Fprintf(p.log, "trueprof: probing %s: %v\n", path, err)
	}
	return nil
}

// entered probes the direct callees of a function of the root's
// subgraph the first time it runs, when its entry did not hold the target
// (its expansion then comes when its event is drained, a few milliseconds
// later, and the calls made meanwhile are not seen).
func (p *uprobePlanner) entered(pid, module uint32, off, _ uint64) error {
	p.expand(int(pid), liveKey{module, off})
	return nil
}

// expand probes the direct callees of the function key of the root's
// subgraph, the first time it is asked to (Scheme B), and releases the
// function's hold: its later entries never stop the target.
func (p *uprobePlanner) expand(pid int, key liveKey) {
	if p.root == "" {
		return
	}
	pf, ok := p.probed[key]
	if !ok || pf.expanded {
		return
	}
	pf.expanded = true
	p.probed[key] = pf
	// Released after its callees are probed: an entry of another thread
	// meanwhile still holds.
	defer p.release(key)
	names := p.callees(pf.path, pf.vaddr)
	if len(names) == 0 {
		return
	}
	for _, name := range names {
		p.named[pf.path+"\x00"+name] = true
	}
	sites, err := uprobe.PlanOptions(pf.path, names, p.options(pf.path))
	var skip *uprobe.SkipError
	if err != nil && !errors.As(err, &skip) {
		return
	}
	if len(sites) == 0 {
		return
	}
	if err := p.attachModule(pid, plannedModule{path: pf.path, sites: sites, root: true}, true); err != nil {
		fmt.Fprintf(p.log, "trueprof: --root: probing the callees of %s: %v\n", pf.name, err)
	}
}

// options are uprobe.Plan's for a set placed in the file at path while
// others probe it: the offsets they hold (Options.Taken), on which a
// call-site probe would share an instruction with a probe of another set,
// the two run by the kernel in no order the replay could rely on
// (--root's lazy callees, ctl trace add).
func (p *uprobePlanner) options(path string) uprobe.Options {
	module, err := p.res.Module(path)
	if err != nil {
		return uprobe.Options{}
	}
	taken := map[uint64]bool{}
	seen := map[*uprobeSource]bool{}
	for k, lp := range p.live {
		if k.module != module || seen[lp.src] {
			continue
		}
		seen[lp.src] = true
		for _, off := range lp.src.set.Offsets() {
			taken[off] = true
		}
	}
	return uprobe.Options{Taken: taken}
}

// release makes the entries of function key stop the target no more.
func (p *uprobePlanner) release(key liveKey) {
	lp, ok := p.live[key]
	if !ok {
		return
	}
	if err := lp.src.set.Release(lp.site); err != nil {
		fmt.Fprintf(p.log, "trueprof: --root: %v\n", err)
	}
}

// callees returns the functions of the file at path that the function at
// vaddr calls directly and that are not probed for the root yet: what
// expanding it would probe. A file whose code cannot be read has none.
func (p *uprobePlanner) callees(path string, vaddr uint64) []string {
	g := p.graphs[path]
	if g == nil {
		var err error
		if g, err = openCallGraph(path); err != nil {
			return nil
		}
		p.graphs[path] = g
	}
	var names []string
	for _, name := range g.callees(vaddr) {
		// Names with glob metacharacters (C++ operators) cannot be
		// given to the planner as exact patterns.
		if !strings.ContainsAny(name, "*?[]\\") && !p.named[path+"\x00"+name] {
			names = append(names, name)
		}
	}
	return names
}

func (p *uprobePlanner) stop() { p.stopped = true }

func (p *uprobePlanner) close() {
	// A recording that ends on an error must not leave the target held.
	if len(p.held) > 0 {
		p.resume(int(p.held[0].pid))
		p.held = nil
	}
	if p.holds > 0 {
		what := "the libraries it loaded"
		if p.root != "" {
			what = "the callees of --root's functions it entered, the libraries it loaded"
		}
		fmt.Fprintf(p.log, "trueprof: the target was held %d times, %v in all, while probes were placed (%s): removed from its times, the report's Paused line\n",
			p.holds, time.Duration(p.heldNS).Round(time.Microsecond), what)
		p.holds = 0
	}
	if p.spare != nil {
		p.spare.Close()
		p.spare = nil
	}
	for _, g := range p.graphs {
		g.close()
	}
	p.graphs = nil
}

// attachModule places a module's probes on a running pid and counts
// their events from the moment all of them are in place; lazy marks
// probes placed by --root's expansion.
func (p *uprobePlanner) attachModule(pid int, m plannedModule, lazy bool) error {
	_, err := p.attachLive(pid, m, lazy)
	return err
}

// attachLive is attachModule returning the source placed: nil when
// recording is stopping or every function of m is probed already.
func (p *uprobePlanner) attachLive(pid int, m plannedModule, lazy bool) (*uprobeSource, error) {
	if p.stopped {
		return nil, nil // recording is stopping: the probes would count nothing
	}
	placed := p.pauses.placing()
	u, err := p.placeModule(pid, m, lazy)
	placed()
	if err != nil || u == nil {
		return nil, err
	}
	return u, p.accept(u, u.set.Live())
}

// placeModule places a planned module's probes on pid and adds their
// source, which counts nothing until accept; lazy marks probes placed by
// --root's expansion. Functions probed already are left out: nil when
// all of them are. A function of the root's subgraph that calls functions
// not probed yet holds the target at its first entry (lazy.go).
func (p *uprobePlanner) placeModule(pid int, m plannedModule, lazy bool) (*uprobeSource, error) {
	module, err := p.res.Module(m.path)
	if err != nil {
		return nil, err
	}
	m.sites = slices.DeleteFunc(slices.Clone(m.sites), func(s uprobe.Site) bool {
		_, ok := p.live[liveKey{module, s.StartOffset}]
		return ok
	})
	if len(m.sites) == 0 {
		return nil, nil
	}
	holds := false
	for i, site := range m.sites {
		if p.inSubgraph(m, site) && len(p.callees(m.path, site.Start)) > 0 {
			m.sites[i].Hold, holds = true, true
		}
	}
	var set *uprobe.Set
	if lazy && p.spare != nil && len(m.sites) <= uprobe.LoadedSites {
		set, err = attachLoaded(p.spare, pid, m.path, m.sites)
		p.spare = nil
	} else {
		set, err = attachUprobes(pid, m.path, m.sites)
	}
	if err != nil {
		return nil, err
	}
	starts := fileOffsets(m.sites)
	u := &uprobeSource{set: set, starts: starts, module: module, from: math.MaxUint64, end: math.MaxUint64}
	for _, site := range m.sites {
		u.points += probePoints(site)
	}
	if holds {
		u.onHold = p.onHold
	}
	p.addSource(u)
	for i, site := range m.sites {
		fn, err := p.res.FileLocation(uint32(pid), module, starts[i])
		if err != nil {
			return nil, err
		}
		mech := trace.ProbeEntry
		switch {
		case lazy:
			mech = trace.ProbeDynamic
		case len(site.Calls) > 0:
			mech = trace.ProbeCallSite
		case len(site.Exits) > 0:
			mech = trace.ProbeRetInsn
		case site.Return:
			mech = trace.ProbeReturn
		}
		u.probes = append(u.probes, trace.Probe{PID: uint32(pid), Function: fn, Address: site.Start, Mech: mech, Stepped: !site.Emulated,
			CallSite: len(site.Calls) > 0, RetInsn: len(site.Exits) > 0})
		root := p.inSubgraph(m, site)
		p.live[liveKey{module, starts[i]}] = liveProbe{src: u, site: i, probe: u.probes[i], path: m.path, name: site.Function, root: root}
		if root {
			p.probed[liveKey{module, starts[i]}] = probedFunc{path: m.path, vaddr: site.Start, name: site.Function}
		}
	}
	return u, nil
}

// probePoints is the number of probe points of site: its entry and
// exits, or a call's and its return point's for each of its calls.
func probePoints(site uprobe.Site) int {
	if len(site.Calls) > 0 {
		n := 0
		for _, c := range site.Calls {
			n++
			if !c.WithCaller {
				n++
			}
		}
		return n
	}
	n := 1 + len(site.Exits)
	if site.Return {
		n++
	}
	return n
}

// inSubgraph reports whether site of m is in the root's subgraph: the
// root itself, or placed for it (its callees, ctl root).
func (p *uprobePlanner) inSubgraph(m plannedModule, site uprobe.Site) bool {
	return p.root != "" && (m.root || site.Function == p.root)
}

// accept makes u count the events from time from on, when its probes
// (and the others placed with them) were all in place, and writes the
// Probe records that say so.
func (p *uprobePlanner) accept(u *uprobeSource, from uint64) error {
	u.from = from
	for i := range u.probes {
		u.probes[i].Time = from
		if err := p.w.Write(&u.probes[i]); err != nil {
			return err
		}
	}
	u.probes = nil
	return nil
}

// plan returns the probe sites of the patterns in file, once per file:
// files are known by absolute, resolved path, which is how the kernel
// names the mappings that come later.
func (p *uprobePlanner) plan(file string) ([]uprobe.Site, error) {
	key, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	if r, err := filepath.EvalSymlinks(key); err == nil {
		key = r
	}
	if p.done[key] {
		return nil, nil
	}
	p.done[key] = true
	sites, err := uprobe.Plan(file, p.patterns)
	var skip *uprobe.SkipError
	switch {
	case errors.Is(err, uprobe.ErrNoMatch), errors.Is(err, uprobe.ErrStripped) && file != p.path:
		return nil, nil
	case errors.As(err, &skip):
		// Functions the planner cannot probe safely are left out, and
		// said so: they will be missing from the report.
		fmt.Fprintf(p.log, "trueprof: not probed: %v\n", skip)
		return sites, nil
	}
	return sites, err
}

// namesOtherModules reports whether a pattern is qualified by a module
// other than the executable: a library the program may load later.
func namesOtherModules(patterns []string, exe string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		mod, _ := uprobe.SplitModule(p)
		return mod != "" && mod != filepath.Base(exe)
	})
}

// reachesLoads reports whether one of patterns can name a function of a
// library loaded later: one without a module, which applies to every
// library probed, or one whose module is not the executable exe.
func reachesLoads(patterns []string, exe string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		mod, _ := uprobe.SplitModule(p)
		return mod != filepath.Base(exe)
	})
}

// matchMapped returns the functions matching pattern in the files
// process pid maps now, exe first, by file: the sites uprobe.Plan gives.
// An invalid pattern is an error; a file that cannot be read, or has no
// symbols, is passed over. options, if not nil, gives Plan's options
// for each file.
func matchMapped(pid int, exe, pattern string, options func(path string) uprobe.Options, log io.Writer) ([]plannedModule, error) {
	var out []plannedModule
	seen := map[string]bool{}
	for _, f := range append([]string{exe}, mappedFiles(pid)...) {
		key := f
		if r, err := filepath.EvalSymlinks(f); err == nil {
			key = r
		}
		if seen[key] || !resolve.IsFile(f) {
			continue
		}
		seen[key] = true
		var o uprobe.Options
		if options != nil {
			o = options(f)
		}
		sites, err := uprobe.PlanOptions(f, []string{pattern}, o)
		var skip *uprobe.SkipError
		switch {
		case errors.Is(err, uprobe.ErrNoMatch), errors.Is(err, uprobe.ErrStripped):
			continue
		case errors.As(err, &skip):
			fmt.Fprintf(log, "trueprof: not probed: %v\n", skip)
		case err != nil && f == exe:
			return nil, err
		case err != nil:
			continue
		}
		out = append(out, plannedModule{path: f, sites: sites})
	}
	return out, nil
}

// planLive plans the probes of pattern in the files process pid maps
// now (matchMapped), leaving out the functions probed already. matched
// counts the functions that match, probed or not.
func (p *uprobePlanner) planLive(pid int, pattern string) (mods []plannedModule, matched int, err error) {
	all, err := matchMapped(pid, p.path, pattern, p.options, p.log)
	if err != nil {
		return nil, 0, err
	}
	for _, m := range all {
		matched += len(m.sites)
		module, err := p.res.Module(m.path)
		if err != nil {
			return nil, 0, err
		}
		m.sites = slices.DeleteFunc(m.sites, func(s uprobe.Site) bool {
			_, ok := p.live[liveKey{module, s.StartOffset}]
			return ok
		})
		if len(m.sites) > 0 {
			mods = append(mods, m)
		}
	}
	return mods, matched, nil
}

// placeLive places planned modules in the running process pid (root:
// as the root's subgraph) and says what it placed.
func (p *uprobePlanner) placeLive(pid int, mods []plannedModule, root bool) (*control.ProbeChange, error) {
	ch := &control.ProbeChange{}
	var names []string
	for _, m := range mods {
		m.root = root
		u, err := p.attachLive(pid, m, false)
		if err != nil {
			return ch, err
		}
		if u == nil {
			continue
		}
		for _, site := range m.sites {
			names = append(names, site.Function)
		}
		ch.Sites += u.points
	}
	ch.Count = len(names)
	ch.Functions = listed(names)
	return ch, nil
}

// listed returns the first control.MaxListed of names, sorted.
func listed(names []string) []string {
	slices.Sort(names)
	return names[:min(len(names), control.MaxListed)]
}

// addPattern probes the functions of pattern in process pid's modules
// now, and in the libraries it maps later.
func (p *uprobePlanner) addPattern(pid int, pattern string) (*control.ProbeChange, error) {
	mods, matched, err := p.planLive(pid, pattern)
	switch {
	case err != nil:
		return nil, err
	case matched == 0:
		return nil, fmt.Errorf("no function of the target's modules matches %q", pattern)
	case len(mods) == 0:
		return nil, fmt.Errorf("the %d functions matching %q are probed already", matched, pattern)
	}
	ch, err := p.placeLive(pid, mods, false)
	if err == nil && !slices.Contains(p.patterns, pattern) {
		p.patterns = append(p.patterns, pattern)
	}
	return ch, err
}

// removePattern removes, at time t, the probes of the probed functions
// that match pattern; libraries mapped later are no longer probed for it.
func (p *uprobePlanner) removePattern(pattern string, t uint64) (*control.ProbeChange, error) {
	byPath := map[string]uint32{}
	for k, lp := range p.live {
		byPath[lp.path] = k.module
	}
	var keys []liveKey
	for path, module := range byPath {
		sites, err := uprobe.Plan(path, []string{pattern})
		var skip *uprobe.SkipError
		if err != nil && !errors.As(err, &skip) && !errors.Is(err, uprobe.ErrNoMatch) && !errors.Is(err, uprobe.ErrStripped) {
			return nil, err
		}
		for _, s := range sites {
			if k := (liveKey{module, s.StartOffset}); p.live[k].src != nil {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no probed function matches %q", pattern)
	}
	p.patterns = slices.DeleteFunc(p.patterns, func(q string) bool { return q == pattern })
	return p.removeKeys(keys, t)
}

// removeKeys removes the probes of functions keys at time t: their
// events from t on are not counted, a Probe record (ProbeRemoved) says
// so, which ends their calls open then in the analysis. A set whose
// functions are all removed comes off the target; one with others still
// probed stays, its removed sites' events dropped.
func (p *uprobePlanner) removeKeys(keys []liveKey, t uint64) (*control.ProbeChange, error) {
	ch := &control.ProbeChange{Count: len(keys)}
	var names []string
	var emptied []*uprobeSource
	for _, k := range keys {
		lp := p.live[k]
		u := lp.src
		if u.siteEnd == nil {
			u.siteEnd = make([]uint64, len(u.starts))
			for i := range u.siteEnd {
				u.siteEnd[i] = math.MaxUint64
			}
		}
		u.siteEnd[lp.site] = t
		// A site that stays in the kernel with others must not hold.
		p.release(k)
		if u.removed++; u.removed == len(u.starts) {
			emptied = append(emptied, u)
		}
		delete(p.live, k)
		delete(p.probed, k)
		names = append(names, lp.name)
		rec := lp.probe
		rec.Time, rec.Mech = t, trace.ProbeRemoved
		if err := p.w.Write(&rec); err != nil {
			return nil, err
		}
	}
	if len(emptied) > 0 {
		removed := p.pauses.placing()
		for _, u := range emptied {
			u.end = min(u.end, t)
			if err := u.set.Detach(); err != nil {
				fmt.Fprintf(p.log, "trueprof: removing probes: %v\n", err)
			}
			ch.Sites += u.points
		}
		removed()
	}
	ch.Functions = listed(names)
	return ch, nil
}

// replaceRoot makes fn the root function in the running process pid:
// the previous root's subgraph comes off at time t, fn is probed, and
// its callees are probed as they first run (Scheme B).
func (p *uprobePlanner) replaceRoot(pid int, fn string, t uint64) (*control.ProbeChange, error) {
	mods, matched, err := p.planLive(pid, fn)
	switch {
	case err != nil:
		return nil, err
	case matched == 0:
		return nil, fmt.Errorf("no function of the target's modules is named %q", fn)
	}
	var old []liveKey
	for k, lp := range p.live {
		if lp.root {
			old = append(old, k)
		}
	}
	removed := 0
	if len(old) > 0 {
		ch, err := p.removeKeys(old, t)
		if err != nil {
			return nil, err
		}
		removed = ch.Count
		// fn may have been in the old subgraph: plan it anew.
		if mods, _, err = p.planLive(pid, fn); err != nil {
			return nil, err
		}
	}
	p.setRoot(fn)
	ch, err := p.placeLive(pid, mods, true)
	if ch != nil {
		ch.Removed = removed
	}
	p.refill()
	return ch, err
}

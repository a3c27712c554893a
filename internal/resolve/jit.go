package resolve

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"trueprof/internal/perf"
	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
)

// jitInfo holds the JIT symbol sources of one process.
type jitInfo struct {
	perfMap *symbolize.PerfMap
	jitDump *symbolize.JitDump
	// readAt is when the files were last read (CLOCK_MONOTONIC, the
	// samples' clock); 0 before the first read.
	readAt uint64
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

// closeJit closes a process's JIT symbol files; what they said stays.
func (r *Resolver) closeJit(pid uint32) {
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
func (r *Resolver) forgetJit(pid uint32) {
	r.closeJit(pid)
	delete(r.jit, pid)
	for id, u := range r.unnamed {
		if u.pid == pid {
			delete(r.unnamed, id)
			r.late.unnamed++
		}
	}
}

// nameLate reads process pid's JIT files again and renames the locations
// of its JIT code that had no name when first sampled. A jitdump names
// code by the time it was loaded: a location is named only if the same
// code was there at its first and its last use. A perf map has no times
// and holds for the process's life, its latest definition of an address
// winning, as perf report reads it. Locations nothing names stay
// waiting, for a later pass.
func (r *Resolver) nameLate(pid uint32) error {
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

// jitLocation returns the Location of addr in process pid, which no
// file maps: m is its anonymous mapping, or nil if it has none.
func (r *Resolver) jitLocation(pid uint32, addr, time uint64, m *Mapping) (uint32, error) {
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
		key.mapped = m.Time
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

var jitDumpName = regexp.MustCompile(`^jit-[0-9]+\.dump$`)

func (r *Resolver) jitInfo(pid uint32) *jitInfo {
	j := r.jit[pid]
	if j == nil {
		j = &jitInfo{uid: ownerUID(pid)}
		r.jit[pid] = j
	}
	return j
}

func (r *Resolver) openJitDump(pid uint32, path string) {
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
// code before running it, so the files as read at some moment describe
// every sample taken before it: they are read again for a sample taken
// after their last read, whether or not addr is known (a known address
// may have been reused by newer code, jitdump, or redefined, perf map;
// a perf map may be created after the code first ran). Samples are
// processed at least the recorder's reorder delay after they were
// taken, so this is about one read (an fstat when nothing was added) a
// pass of the recording loop. Reading every 10 ms of trace time instead
// named 4 samples after the old code of a reused address (jitdump), the
// new code's load record written after the last read.
func (r *Resolver) jitFrame(pid uint32, addr, time uint64) (symbolize.Frame, bool) {
	j := r.jitInfo(pid)
	if j.readAt == 0 || time >= j.readAt {
		j.readAt = perf.Now()
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
func (r *Resolver) loadJit(pid uint32, j *jitInfo) {
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

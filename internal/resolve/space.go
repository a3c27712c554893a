package resolve

import (
	"sort"
	"strconv"
	"strings"
)

// Mapping is one executable mapping of a process: [Start, End) maps the
// file Path from offset PgOff, at trace time Time.
type Mapping struct {
	Start, End, PgOff uint64
	Path              string
	// BuildID is the build id the kernel read from the mapped file (nil if
	// it gave none): a file found at Path with another one is not used.
	BuildID []byte
	Time    uint64
}

// ParseMapsLine parses an executable mapping of /proc/PID/maps:
// "start-end perms offset dev inode path". It reports false for a
// mapping that is not executable or a line it cannot read.
func ParseMapsLine(line string) (Mapping, bool) {
	f := strings.Fields(line)
	if len(f) < 5 || len(f[1]) < 3 || f[1][2] != 'x' {
		return Mapping{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return Mapping{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	off, err3 := strconv.ParseUint(f[2], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || end <= start {
		return Mapping{}, false
	}
	path := ""
	if len(f) >= 6 {
		path = strings.Join(f[5:], " ")
	}
	return Mapping{Start: start, End: end, PgOff: off, Path: path}, true
}

// addrSpace is a process's executable mappings at the current point of
// the time-ordered record stream, sorted by start.
type addrSpace struct {
	maps []Mapping
	// since is when this image began, at an exec or a fork that reused
	// the pid (0: at a fork or the start of the recording), and prev the
	// image it replaced: a hook event stamped before can reach the
	// resolver after the record (the hooks' batches are handed over late
	// when their rate is low), and must resolve against the code that
	// ran it.
	since uint64
	prev  *addrSpace
}

// maxImages bounds the images a process's addrSpace keeps: events late
// by more than a few execs (each one mapping and starting a program)
// do not occur.
const maxImages = 4

// at returns the image of the process at time t.
func (as *addrSpace) at(t uint64) *addrSpace {
	for as.prev != nil && t < as.since {
		as = as.prev
	}
	return as
}

// replace makes next the image that follows as from time t on, keeping
// as, and at most maxImages-2 images before it, for events stamped
// earlier, and returns next.
func (as *addrSpace) replace(next *addrSpace, t uint64) *addrSpace {
	p := as
	for range maxImages - 2 {
		if p.prev == nil {
			break
		}
		p = p.prev
	}
	p.prev = nil
	next.since, next.prev = t, as
	return next
}

// insert adds m, trimming whatever it overlaps as mmap(2) does.
func (as *addrSpace) insert(m Mapping) {
	out := as.maps[:0:0]
	for _, o := range as.maps {
		if o.End <= m.Start || o.Start >= m.End {
			out = append(out, o)
			continue
		}
		if o.Start < m.Start {
			left := o
			left.End = m.Start
			out = append(out, left)
		}
		if o.End > m.End {
			right := o
			right.PgOff += m.End - o.Start
			right.Start = m.End
			out = append(out, right)
		}
	}
	out = append(out, m)
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	as.maps = out
}

// find returns the mapping containing addr, or nil.
func (as *addrSpace) find(addr uint64) *Mapping {
	i := sort.Search(len(as.maps), func(i int) bool { return as.maps[i].End > addr })
	if i < len(as.maps) && as.maps[i].Start <= addr {
		return &as.maps[i]
	}
	return nil
}

// clone is a forked child's copy of the current image.
func (as *addrSpace) clone() *addrSpace {
	return &addrSpace{maps: append([]Mapping(nil), as.maps...)}
}

// isAnon reports whether a mapping path names anonymous memory, where JITs
// put their code.
func isAnon(path string) bool {
	return path == "" || path == "//anon" || strings.HasPrefix(path, "[anon") || strings.HasPrefix(path, "/memfd:")
}

// IsFile reports whether a mapping's path names a file whose code can be
// read (and probed), neither anonymous memory nor kernel-provided code.
func IsFile(path string) bool {
	return !isAnon(path) && !isSpecial(path)
}

// isSpecial reports whether a mapping is kernel-provided code such as
// [vdso] or [vsyscall].
func isSpecial(path string) bool {
	return strings.HasPrefix(path, "[")
}

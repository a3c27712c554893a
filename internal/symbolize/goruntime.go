package symbolize

import (
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GoLayout is where a Go binary's runtime keeps what tells goroutines
// apart. A profiler that catches the scheduler switching to a goroutine
// holds a *runtime.g, and reads the goroutine's id at GoID bytes into it:
// these offsets change between Go versions and with the runtime's
// build tags, so they come from the binary itself, never from a table.
type GoLayout struct {
	// Version is the Go release that built the binary ("go1.26.0").
	Version string
	// GoID is the offset of runtime.g.goid, the id runtime.Stack prints.
	GoID int64
	// Labels is the offset of runtime.g.labels (runtime/pprof's labels),
	// -1 if the binary's runtime has none.
	Labels int64
	// CoroArg is the offset of runtime.g.coroarg, the coroutine a
	// goroutine switches through (iter.Pull), and CoroG that of
	// runtime.coro.gp, the goroutine the switch resumes; -1 if the
	// binary has no coroutines.
	CoroArg, CoroG int64
}

// Errors of ReadGoLayout, for errors.Is.
var (
	// ErrNotGo means the file is not a Go executable.
	ErrNotGo = errors.New("not a Go executable")
	// ErrNoGoDWARF means the Go executable has no DWARF describing
	// runtime.g (it was built with -ldflags=-w or stripped).
	ErrNoGoDWARF = errors.New("no DWARF for runtime.g (built with -ldflags=-w, or stripped)")
	// ErrOldGo means the Go executable predates the register ABI (Go
	// 1.17), which is what lets a probe find a function's arguments.
	ErrOldGo = errors.New("built by a Go release before 1.17 (no register ABI)")
)

// ReadGoLayout reads the Go version from an executable's build info and
// the offsets of GoLayout from its DWARF. It returns ErrNotGo for a file
// Go did not link, ErrOldGo before Go 1.17, and ErrNoGoDWARF when the
// binary has no DWARF to say where runtime.g keeps the goroutine id.
func ReadGoLayout(path string) (GoLayout, error) {
	l := GoLayout{Labels: -1, CoroArg: -1, CoroG: -1}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return l, fmt.Errorf("%s: %w", path, ErrNotGo)
	}
	l.Version = bi.GoVersion
	if !registerABI(l.Version) {
		return l, fmt.Errorf("%s: %s: %w", path, l.Version, ErrOldGo)
	}
	f, err := elf.Open(path)
	if err != nil {
		return l, err
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		return l, fmt.Errorf("%s: %w", path, ErrNoGoDWARF)
	}
	members, err := structMembers(d, map[string][]string{
		"runtime.g":    {"goid", "labels", "coroarg"},
		"runtime.coro": {"gp"},
	})
	if err != nil {
		return l, fmt.Errorf("%s: reading DWARF: %w", path, err)
	}
	goid, ok := members["runtime.g.goid"]
	if !ok {
		return l, fmt.Errorf("%s: %w", path, ErrNoGoDWARF)
	}
	l.GoID = goid
	if v, ok := members["runtime.g.labels"]; ok {
		l.Labels = v
	}
	if v, ok := members["runtime.coro.gp"]; ok {
		l.CoroG = v
	}
	if v, ok := members["runtime.g.coroarg"]; ok {
		l.CoroArg = v
	}
	return l, nil
}

// registerABI reports whether Go release v ("go1.21.3", "devel ...")
// passes arguments in registers on amd64 (Go 1.17 and later).
func registerABI(v string) bool {
	rest, ok := strings.CutPrefix(v, "go1.")
	if !ok {
		return true // a development build: newer than any release
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		rest = rest[:end]
	}
	minor, err := strconv.Atoi(rest)
	return err != nil || minor >= 17
}

// structMembers finds the named struct types among d's top-level types
// and returns the byte offsets of the wanted members, keyed
// "type.member". The Go linker puts every type in one compilation unit's
// children, so the search never descends into functions.
func structMembers(d *dwarf.Data, want map[string][]string) (map[string]int64, error) {
	out := map[string]int64{}
	found := 0
	r := d.Reader()
	for found < len(want) {
		e, err := r.Next()
		if err != nil {
			return out, err
		}
		if e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == 0 {
			continue // descend into the unit's children; 0 ends a list
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		members, ok := want[name]
		if e.Tag != dwarf.TagStructType || !ok {
			if e.Children {
				r.SkipChildren()
			}
			continue
		}
		found++
		for e.Children {
			m, err := r.Next()
			if err != nil {
				return out, err
			}
			if m == nil || m.Tag == 0 {
				break
			}
			mname, _ := m.Val(dwarf.AttrName).(string)
			off, ok := m.Val(dwarf.AttrDataMemberLoc).(int64)
			if m.Tag == dwarf.TagMember && ok && slices.Contains(members, mname) {
				out[name+"."+mname] = off
			}
			if m.Children {
				r.SkipChildren()
			}
		}
	}
	return out, nil
}

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
	// LabelSet is how runtime/pprof lays out the label set that
	// runtime.g.labels points to; its Size is 0 when the binary has no
	// runtime/pprof or a layout ReadGoLayout does not know.
	LabelSet LabelLayout
}

// LabelLayout is where a runtime/pprof label set (the runtime/pprof
// labelMap that runtime/pprof.runtime_setProfLabel stores in
// runtime.g.labels) keeps its labels: a slice of {key, value string}
// structs since Go 1.24. A probe reads the labels out of the target's
// memory at these offsets, which Go has changed twice (a map before Go
// 1.24, a package-internal label type in Go 1.26), so they come from
// DWARF.
type LabelLayout struct {
	// List is the offset of the slice of labels in the label set.
	List int64
	// Size is the size of one label, Key and Value the offsets of its
	// key and value strings (a pointer and a length each).
	Size, Key, Value int64
}

// labelMapType is the DWARF name of the type runtime.g.labels points to.
const labelMapType = "runtime/pprof.labelMap"

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
	members, labelSet, err := structMembers(d, map[string][]string{
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
	if labelSet != 0 {
		l.LabelSet, _ = labelLayout(d, labelSet)
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
// "type.member", and where the label set's type (labelMapType) is, 0 if
// the binary has none. The Go linker puts every type in one compilation
// unit's children, so the search never descends into functions and ends
// with the unit where it found a type: one pass over the types, not over
// the whole of the DWARF.
func structMembers(d *dwarf.Data, want map[string][]string) (map[string]int64, dwarf.Offset, error) {
	out := map[string]int64{}
	var labelSet dwarf.Offset
	found := 0
	r := d.Reader()
	for found < len(want) || labelSet == 0 {
		e, err := r.Next()
		if err != nil {
			return out, labelSet, err
		}
		if e == nil || e.Tag == dwarf.TagCompileUnit && found > 0 {
			break
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == 0 {
			continue // descend into the unit's children; 0 ends a list
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if e.Tag == dwarf.TagStructType && name == labelMapType && labelSet == 0 {
			labelSet = e.Offset
		}
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
				return out, labelSet, err
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
	return out, labelSet, nil
}

// labelLayout finds the labels of runtime/pprof's label set, the type at
// off in DWARF: the set wraps (through structs of one member, such as
// label.Set) a slice whose elements hold two strings named key and value
// (in any case). It fails for a layout of another shape (Go before 1.24
// kept a map).
func labelLayout(d *dwarf.Data, off dwarf.Offset) (LabelLayout, error) {
	t, err := d.Type(off)
	if err != nil {
		return LabelLayout{}, err
	}
	set, ok := t.(*dwarf.StructType)
	if !ok {
		return LabelLayout{}, fmt.Errorf("%s is a %v, not a struct", labelMapType, t)
	}
	var l LabelLayout
	for {
		if len(set.Field) != 1 {
			return l, fmt.Errorf("%s: %d members, want 1", set.StructName, len(set.Field))
		}
		f := set.Field[0]
		inner, ok := unTypedef(f.Type).(*dwarf.StructType)
		if !ok {
			return l, fmt.Errorf("%s.%s is a %v, not a slice", set.StructName, f.Name, f.Type)
		}
		l.List += f.ByteOffset
		if !strings.HasPrefix(inner.StructName, "[]") {
			set = inner
			continue
		}
		// A Go slice: {array *T, len, cap int}.
		if len(inner.Field) != 3 || inner.Field[0].Name != "array" {
			return l, fmt.Errorf("%s: not a slice", inner.StructName)
		}
		p, ok := unTypedef(inner.Field[0].Type).(*dwarf.PtrType)
		if !ok {
			return l, fmt.Errorf("%s: not a slice", inner.StructName)
		}
		elem, ok := unTypedef(p.Type).(*dwarf.StructType)
		if !ok {
			return l, fmt.Errorf("%s: elements are not structs", inner.StructName)
		}
		l.Size, l.Key, l.Value = elem.ByteSize, -1, -1
		for _, m := range elem.Field {
			if s, ok := unTypedef(m.Type).(*dwarf.StructType); !ok || s.StructName != "string" {
				continue
			}
			switch strings.ToLower(m.Name) {
			case "key":
				l.Key = m.ByteOffset
			case "value":
				l.Value = m.ByteOffset
			}
		}
		if l.Key < 0 || l.Value < 0 || l.Size <= 0 {
			return LabelLayout{}, fmt.Errorf("%s: no key and value strings", elem.StructName)
		}
		return l, nil
	}
}

// unTypedef returns the type a typedef names, t itself if it is none.
func unTypedef(t dwarf.Type) dwarf.Type {
	for {
		td, ok := t.(*dwarf.TypedefType)
		if !ok {
			return t
		}
		t = td.Type
	}
}

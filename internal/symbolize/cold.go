package symbolize

import (
	"cmp"
	"debug/elf"
	"regexp"
	"slices"
	"sync"
)

// Cold parts. GCC (from -O2: -freorder-blocks-and-partition) and LLVM's
// hot/cold splitting move the unlikely blocks of a function into a
// symbol of their own in .text.unlikely: "main.cold" and "foo.cold.3" in
// C, "foo(int) [clone .cold]" in C++. The function jumps into its cold
// part and the part jumps back or returns for it: it runs in the
// function's frame and is never called. Naming the code at an address,
// as sampling does, keeps the part's own name (as perf does); but code
// that counts calls (uprobes), follows a function's exits or its callees
// must take the part as the function's own code.

// coldName matches the name of a cold part, submatch 1 being its
// function's name: a C part ("main.cold", "foo.constprop.0.cold.12") or
// a demangled C++ one ("foo(int) [clone .cold]", with the clone suffixes
// before it).
var coldName = regexp.MustCompile(`^(.+?)(?:\.cold(?:\.[0-9]+)?| \[clone \.cold(?:\.[0-9]+)?\])$`)

// coldParentName returns the name of the function whose cold part is
// named name, and false when name is not a cold part's.
func coldParentName(name string) (string, bool) {
	m := coldName.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// coldParts is a file's cold parts and their functions, found once
// (File.coldIndex).
type coldParts struct {
	once   sync.Once
	parent map[uint64]Function   // by the part's address; zero when not found
	parts  map[uint64][]Function // by the function's address
}

// ColdParent reports whether the function symbol at addr is a cold part
// and, if so, returns the function it belongs to: the function of the
// part's name, or, among several of that name (static functions of
// several files), the one that branches to the part. The function is
// zero when none is found (its symbol stripped, or no candidate
// branches there). Go code has no cold parts.
func (f *File) ColdParent(addr uint64) (Function, bool) {
	c := f.coldIndex()
	p, ok := c.parent[addr]
	return p, ok
}

// ColdParts returns the cold parts of the function starting at addr, in
// address order; none for most functions.
func (f *File) ColdParts(addr uint64) []Function {
	return f.coldIndex().parts[addr]
}

// coldIndex finds the file's cold parts and their functions once.
func (f *File) coldIndex() *coldParts {
	c := &f.cold
	c.once.Do(func() {
		c.parent, c.parts = map[uint64]Function{}, map[uint64][]Function{}
		if f.IsGo() {
			return // "main.cold" is an ordinary Go function's name
		}
		fns := f.Functions()
		want := map[string][]Function{} // parts by their function's name
		for _, fn := range fns {
			if name, ok := coldParentName(fn.Name); ok {
				if _, seen := c.parent[fn.Addr]; !seen {
					c.parent[fn.Addr] = Function{}
					want[name] = append(want[name], fn)
				}
			}
		}
		if len(want) == 0 {
			return
		}
		candidates := map[string][]Function{}
		for _, fn := range fns {
			if _, ok := want[fn.Name]; ok {
				candidates[fn.Name] = append(candidates[fn.Name], fn)
			}
		}
		for name, parts := range want {
			for _, part := range parts {
				cands := candidates[name]
				var parent Function
				switch {
				case len(cands) == 1:
					parent = cands[0]
				case len(cands) > 1:
					for _, fn := range cands {
						if f.branchesTo(fn, part.Addr) {
							parent = fn
							break
						}
					}
				}
				if parent.Name == "" {
					continue
				}
				c.parent[part.Addr] = parent
				c.parts[parent.Addr] = append(c.parts[parent.Addr], part)
			}
		}
		for _, ps := range c.parts {
			slices.SortFunc(ps, func(a, b Function) int { return cmp.Compare(a.Addr, b.Addr) })
		}
	})
	return c
}

// branchesTo reports whether fn's code holds a direct jump or call to
// target.
func (f *File) branchesTo(fn Function, target uint64) bool {
	if f.Machine() != elf.EM_X86_64 {
		return false
	}
	code, err := f.Code(fn.Addr, fn.Size)
	if err != nil {
		return false
	}
	for _, t := range directBranches(code, fn.Addr) {
		if t == target {
			return true
		}
	}
	return false
}

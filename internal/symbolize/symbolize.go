package symbolize

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Frame is one function at a source position. Function is never empty when
// returned by this package; File is "" and Line is 0 when unknown.
type Frame struct {
	Function string
	File     string
	Line     int
}

// Errors reported by this package, matched with errors.Is.
var (
	// ErrUntrusted is returned when a perf map or jitdump file is not a
	// regular file owned by the expected user, or is a symbolic link.
	ErrUntrusted = errors.New("symbolize: untrusted symbol file")
	// ErrNoKernelAddresses is returned by LoadKallsyms when every address
	// is zero, which is what the kernel shows when kptr_restrict hides
	// them from the reader.
	ErrNoKernelAddresses = errors.New("symbolize: kallsyms addresses are hidden (kptr_restrict)")
	// ErrFormat is wrapped by DecodeError for structurally invalid input.
	ErrFormat = errors.New("malformed data")
)

// DecodeError reports malformed input: what was being decoded, the byte
// offset of the first problem found and why.
type DecodeError struct {
	Name   string // ".eh_frame", "jitdump", "kallsyms", ...
	Offset int64  // byte offset (line number for line-oriented text files)
	Err    error
}

// Error implements error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("symbolize: decoding %s at offset %#x: %v", e.Name, e.Offset, e.Err)
}

// Unwrap returns the underlying error.
func (e *DecodeError) Unwrap() error { return e.Err }

// Demangle returns the human-readable form of a C++ (_Z...) or Rust (legacy
// _ZN...17h<hash>E, whose hash is dropped, or v0 _R...) symbol name. C++
// names keep their parameter types so that overloads stay distinct, as in
// callgrind, and lose the return type of template functions, as in perf.
// Any other name, and any name that fails to demangle, is returned
// unchanged.
func Demangle(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		// Fast path: C, Go and most other names are not mangled, and the
		// demangler would only reject them after some work.
		return name
	}
	// A symbol versioned in a .symtab keeps its "@VER" or "@@VER" suffix;
	// demangle the name part only.
	base, ver := name, ""
	if i := strings.IndexByte(name, '@'); i > 0 {
		base, ver = name[:i], name[i:]
	}
	if strings.HasPrefix(base, "_Z") && !rustLegacy(base) {
		a, err := demangle.ToAST(base, demangle.MaxLength(16))
		if err != nil {
			return name
		}
		return demangle.ASTToString(dropReturnType(a)) + ver
	}
	s, err := demangle.ToString(base, demangle.MaxLength(16))
	if err != nil {
		return name
	}
	return s + ver
}

// rustLegacy reports whether name is a legacy Rust symbol
// (_ZN...17h<16 hex digits>E, optionally followed by ".suffix"), which only
// demangle.ToString turns into Rust's spelling without the hash.
func rustLegacy(name string) bool {
	if i := strings.LastIndex(name, "E."); i > 0 {
		name = name[:i+1]
	}
	return strings.HasPrefix(name, "_ZN") && strings.HasSuffix(name, "E") &&
		len(name) > 23 && name[len(name)-20:len(name)-17] == "17h"
}

// dropReturnType removes the return type that the Itanium ABI mangles into
// template functions, so that "std::__introsort_loop<...>(...)" reads as
// perf and callgrind show it rather than "void std::__introsort_loop<...>
// (...)": a name that starts with its return type sorts, shortens (pprof
// drops everything after the first parenthesis, not what is before the
// name) and truncates badly.
func dropReturnType(a demangle.AST) demangle.AST {
	switch a := a.(type) {
	case *demangle.Clone:
		c := *a
		c.Base = dropReturnType(a.Base)
		return &c
	case *demangle.Typed:
		ft, ok := a.Type.(*demangle.FunctionType)
		if !ok || ft.Return == nil {
			return a
		}
		f := *ft
		f.Return = nil
		t := *a
		t.Type = &f
		return &t
	}
	return a
}

// addrName is the name given to an address with no known function:
// "BASENAME+0xADDR".
func addrName(base string, addr uint64) string {
	return fmt.Sprintf("%s+%#x", base, addr)
}

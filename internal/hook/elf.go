package hook

import (
	"debug/elf"
	"errors"
	"fmt"
)

// The -finstrument-functions hooks.
const (
	hookEnter = "__cyg_profile_func_enter"
	hookExit  = "__cyg_profile_func_exit"
)

// ErrNotInterposable is returned by Instrumented for a program built with
// -finstrument-functions whose hooks a preloaded library cannot replace.
var ErrNotInterposable = errors.New("hooks cannot be interposed by preloading")

// Instrumented reports whether the ELF executable at path calls
// __cyg_profile_func_enter through the dynamic linker (an undefined
// dynamic symbol), that is, was built with -finstrument-functions and
// can record through the preloaded hook library. A statically linked
// executable with the hooks, or one that defines them itself, gives an
// error wrapping ErrNotInterposable that says to use uprobes. A stripped
// static executable reports false.
func Instrumented(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	dynamic := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			dynamic = true
		}
	}
	if dynamic {
		syms, err := f.DynamicSymbols()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return false, err
		}
		for _, s := range syms {
			if s.Name != hookEnter {
				continue
			}
			if s.Section == elf.SHN_UNDEF {
				return true, nil
			}
			return false, fmt.Errorf("%s defines %s itself: %w; record it with uprobes", path, hookEnter, ErrNotInterposable)
		}
	}
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return false, err
	}
	for _, s := range syms {
		if s.Name == hookEnter && s.Section != elf.SHN_UNDEF {
			if !dynamic {
				return false, fmt.Errorf("%s is statically linked with -finstrument-functions hooks: %w; record it with uprobes", path, ErrNotInterposable)
			}
			return false, fmt.Errorf("%s defines %s itself: %w; record it with uprobes", path, hookEnter, ErrNotInterposable)
		}
	}
	return false, nil
}

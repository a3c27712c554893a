package hook

import (
	"errors"
	"fmt"
	"slices"

	"trueprof/internal/symbolize"
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
	f, err := symbolize.OpenFileOptions(path, symbolize.Options{NoDebugFile: true})
	if err != nil {
		return false, err
	}
	defer f.Close()
	dynamic := f.Dynamic()
	if dynamic && f.Imports(hookEnter) {
		return true, nil
	}
	if !slices.ContainsFunc(f.Functions(), func(fn symbolize.Function) bool { return fn.Name == hookEnter }) {
		return false, nil
	}
	if !dynamic {
		return false, fmt.Errorf("%s is statically linked with -finstrument-functions hooks: %w; record it with uprobes (--trace FUNC), or link it dynamically", path, ErrNotInterposable)
	}
	return false, fmt.Errorf("%s defines %s itself: %w; record it with uprobes (--trace FUNC)", path, hookEnter, ErrNotInterposable)
}

package export

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"trueprof/internal/calltree"
)

// names collects the modules that define each exported function name:
// pprof's reports merge functions by name, trueprof tells them apart by
// name and module, so a name that several modules define is exported
// qualified with its module in each.
type names map[string]map[string]bool

// add notes that f is exported.
func (n names) add(f calltree.Func) {
	if n[f.Name] == nil {
		n[f.Name] = map[string]bool{}
	}
	n[f.Name][f.Module] = true
}

// export returns the name f is exported as: "name (module)" when
// several modules define the name, the name otherwise.
func (n names) export(f calltree.Func) string {
	if len(n[f.Name]) > 1 {
		return fmt.Sprintf("%s (%s)", f.Name, f.Module)
	}
	return f.Name
}

// addMappings adds to prof one mapping per module of modules (repeats
// and "" are ignored) and returns them by module. Each has no address
// range (the model keeps none, and a module sits at different addresses
// in different processes) and all Has* flags, so that pprof does not
// look for the binaries. pprof names a profile after its first mapping
// ("File:" in its reports): the module that looks like a program rather
// than a library or a pseudo module ("[kernel.kallsyms]") and weighs
// most comes first.
func addMappings(prof *profile.Profile, modules []string, weight map[string]float64) map[string]*profile.Mapping {
	mappings := map[string]*profile.Mapping{}
	for _, module := range modules {
		if module != "" && mappings[module] == nil {
			mappings[module] = &profile.Mapping{
				File:            module,
				HasFunctions:    true,
				HasFilenames:    true,
				HasLineNumbers:  true,
				HasInlineFrames: true,
			}
		}
	}
	program := func(module string) bool {
		return !strings.HasPrefix(module, "[") && !sharedLibrary.MatchString(module)
	}
	order := slices.Collect(maps.Keys(mappings))
	slices.SortFunc(order, func(a, b string) int {
		if pa, pb := program(a), program(b); pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(weight[b], weight[a]), cmp.Compare(a, b))
	})
	for _, module := range order {
		m := mappings[module]
		m.ID = uint64(len(prof.Mapping) + 1)
		prof.Mapping = append(prof.Mapping, m)
	}
	return mappings
}

// sharedLibrary matches the file names of shared libraries: "libc.so.6".
var sharedLibrary = regexp.MustCompile(`\.so($|\.)`)

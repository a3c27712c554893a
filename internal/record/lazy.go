package record

import (
	"trueprof/internal/symbolize"
)

// callGraph finds the direct callees of a module's functions, for --root
// (Scheme B): when a probed function first runs, the functions
// it calls directly are probed in turn, so only the root's subgraph pays
// for probes.
type callGraph struct {
	f *symbolize.File
}

func openCallGraph(path string) (*callGraph, error) {
	f, err := symbolize.OpenFileOptions(path, symbolize.Options{NoDebugFile: true})
	if err != nil {
		return nil, err
	}
	return &callGraph{f: f}, nil
}

func (g *callGraph) close() error { return g.f.Close() }

// callees returns the names of the functions of this module that the
// function at vaddr calls directly (symbolize.File.Callees), each once.
func (g *callGraph) callees(vaddr uint64) []string {
	var out []string
	seen := map[string]bool{}
	for _, fn := range g.f.Callees(vaddr) {
		if !seen[fn.Name] {
			seen[fn.Name] = true
			out = append(out, fn.Name)
		}
	}
	return out
}

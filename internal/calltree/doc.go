// Package calltree is trueprof's one analysis engine: it turns a
// profile's records into call-stack trees, and every view, export and
// the web page renders from its result.
//
// A Table expands each location of a profile into function ids once, so
// that the analysis compares and indexes functions by number instead of
// hashing their names at every sample or event:
//
//	t := calltree.NewTable(prof)
//	funcs, leaf := t.Stack(sample.Stack, nil) // outermost first
//	fmt.Println(t.Func(funcs[0]).Name, t.Func(leaf).Name)
package calltree

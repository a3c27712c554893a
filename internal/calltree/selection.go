package calltree

// FunctionsOf is Result.Functions over a selection of threads: procs
// holds the processes of a Result with only the selected threads (for
// example one process, or one thread). The threads' trees are disjoint,
// so a function's numbers over the selection are those of its nodes
// there, with the same rules as Result.Functions. Never nil.
func FunctionsOf(procs []Process) []Function { return functions(procs) }

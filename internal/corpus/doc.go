// Package corpus holds trueprof's end-to-end tests on real-world programs,
// built the way distributions build software: a JVM program with a perf
// map, a node program with --perf-basic-prof, a Rust release build, C++
// at -O2 without frame pointers, Debian's own stripped python3, sqlite3
// and xz, and a multi-process gcc build.
//
// Each program is recorded with `trueprof record` at default settings and
// reported with `trueprof report --no-inlines --format json`; the test
// asserts that no record was lost, logs the share of samples whose leaf has
// no symbol, and compares the self shares of the top functions with
// `perf report --no-children` of `perf record -F 999 -e cpu-clock` on the
// same program and workload, in the same run (for the JIT runtimes, not
// the functions whose code shared addresses with other code in perf's
// run: perf report resolves every sample with the final perf map). For the
// programs that are not JIT runtimes it also asserts that at least 99% of
// the stacks are complete, and compares the self shares and the inclusive
// (children) shares of the top functions with perf's on one execution
// (perf run under a second trueprof, both sides restricted to the
// program's main process name), the inclusive ones against `perf report
// --children` of `perf record --call-graph dwarf`. The package
// has no code of its own, only tests and their testdata:
//
//	go test -v ./internal/corpus                 # every program, with its table
//	go test -v ./internal/corpus -run 'Corpus/xz' # one program
//
// docs/corpus.md lists the programs and the shares last measured.
package corpus

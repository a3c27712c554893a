// Package web shows a profile in a browser: a functions table, function
// detail with exact per-caller shares, the call graph as a "river of
// time" laid out by an embedded WebAssembly Graphviz,
// flame and icicle graphs, annotated source or disassembly, and a
// per-thread timeline, all linked by one selection.
//
// The same page is served by `trueprof serve` and written whole, with its
// data inlined, by `trueprof report --format html`:
//
//	p, err := model.Open("trueprof.trace")
//	...
//	err = web.Serve(ctx, web.DefaultAddr, p, "trueprof.trace", func(url string) {
//		fmt.Println("serving at", url)
//	})
//
//	err = web.WriteHTML(f, p, web.HTMLOptions{Title: "trueprof.trace"})
//
// Build computes the page's data once: every thread incarnation's call
// tree in columnar form (calltree.Build's, of the calls of instrumented
// recordings, of the samples' stacks otherwise), for every thread
// selection the page offers (all threads, each process, each thread, the
// command line's) the engine's functions table with callers and callees
// (calltree.FunctionsOf), line-level samples and the timeline. The page
// shows those numbers as they are (the Chromium tests check they are the
// reports'); its script keeps only the indexes it navigates by.
//
// The server is read-only and loopback by default; it serves only the
// trace it was given and the source files its locations name (see
// docs/web.md, "Security model").
package web

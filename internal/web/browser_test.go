package web

// End-to-end tests of the page in real headless Chromium (Debian package
// chromium, installed by .ci/run), driven over the DevTools protocol with
// chromedp. Screenshots are kept in $TRUEPROF_ARTIFACTS/web-screenshots,
// or a directory under the system temporary directory whose path is
// logged.

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"trueprof/examples"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/perf"
	"trueprof/internal/record"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// browser starts headless Chromium and returns a context driving a tab
// of it; JavaScript exceptions and console errors fail the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := testutil.RequireCommand(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in CI: Chromium refuses its sandbox
		chromedp.DisableGPU,
		chromedp.WindowSize(1600, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	var mu sync.Mutex
	var errs []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := fmt.Sprintf("%s at %s:%d:%d", d.Text, d.URL, d.LineNumber+1, d.ColumnNumber+1)
			if d.Exception != nil {
				msg += ": " + d.Exception.Description
			}
			errs = append(errs, msg)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value))
				}
				errs = append(errs, "console.error: "+strings.Join(parts, " "))
			}
		}
	}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			t.Errorf("page error: %s", e)
		}
	})
	return ctx
}

var artifacts struct {
	sync.Once
	dir string
}

// screenshot saves the whole page as NAME.png in the artefact directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	artifacts.Do(func() {
		base := os.Getenv("TRUEPROF_ARTIFACTS")
		if base == "" {
			base = os.TempDir()
		}
		artifacts.dir = filepath.Join(base, "trueprof-web-screenshots")
		os.MkdirAll(artifacts.dir, 0o755)
	})
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(artifacts.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot %s", path)
}

// recorded is the trace of examples/hotspots, recorded once per test
// binary, with its source next to it so the source view has a file.
var recorded struct {
	sync.Once
	dir, path string
	err       error
}

func recordHotspots(t *testing.T) *model.Profile {
	t.Helper()
	testutil.RequirePerf(t)
	recorded.Do(func() {
		dir, err := os.MkdirTemp("", "trueprof-web-test-")
		if err != nil {
			recorded.err = err
			return
		}
		recorded.dir = dir
		bin := testutil.BuildC(t, dir, "hotspots", examples.Hotspots, "-pthread")
		ev, err := perf.ParseEvent("cpu-clock")
		if err != nil {
			recorded.err = err
			return
		}
		recorded.path = filepath.Join(dir, "hotspots.trace")
		_, recorded.err = record.Run(context.Background(), record.Config{
			Output: recorded.path, Event: ev, Freq: 999, Mode: trace.ModeNormal, SizeLimit: 64 << 20,
			Command: []string{bin, "400"}, Log: os.Stderr,
		})
	})
	if recorded.err != nil {
		t.Fatalf("recording the fixture: %v", recorded.err)
	}
	p, err := model.Open(recorded.path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMain(m *testing.M) {
	// record.Run launches the target through this binary re-executed as
	// its exec wrapper.
	record.RunWrapper()
	code := m.Run()
	if recorded.dir != "" {
		os.RemoveAll(recorded.dir)
	}
	os.Exit(code)
}

// eval runs a JavaScript expression and returns its JSON result.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// run runs the steps of what the test does, failing it at the first
// that fails.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Query actions on CSS selectors.
func waitFor(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitReady(chromedp.CSS(sel)) }
func click(sel string) chromedp.Action[chromedp.Void]   { return chromedp.Click(chromedp.CSS(sel)) }
func focus(sel string) chromedp.Action[chromedp.Void]   { return chromedp.Focus(chromedp.CSS(sel)) }

// funcIndex is the index of the function called name in the page's data.
func funcIndex(t *testing.T, ctx context.Context, name string) int {
	t.Helper()
	i := eval[int](t, ctx, fmt.Sprintf("TP.app.model.data.funcs.name.indexOf(%q)", name))
	if i < 0 {
		t.Fatalf("no function %s in the page", name)
	}
	return i
}

// setSelect chooses an option of a <select> as a user would, firing its
// change event.
func setSelect(sel, value string) chromedp.Action[chromedp.Void] {
	return js(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; e.dispatchEvent(new Event("change")); })()`, sel, value))
}

// js runs a JavaScript expression as a step, ignoring its value.
func js(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](expr)(ctx, tg)
		return err
	})
}

// edgeWidths returns the stroke widths of the call graph's arcs (1 when
// Graphviz leaves the default).
func edgeWidths(t *testing.T, ctx context.Context) []string {
	return eval[[]string](t, ctx, `[...document.querySelectorAll("#graph-view g.edge path")].map(p => p.getAttribute("stroke-width") || "1")`)
}

// checkHotspots runs the user's path through the UI of the hotspots
// recording at url: select a function, change the time filter, switch
// the weighting, step a node, make a virtual root, open the source, the
// flame graph and the timeline.
func checkHotspots(t *testing.T, ctx context.Context, url, prefix string) {
	run(t, ctx, "loading the page", chromedp.Navigate(url),
		waitFor(`body[data-ready="1"]`),
		waitFor(`#graph-view svg g.node`))

	first := eval[string](t, ctx, `document.querySelector("#table-rows .vrow").dataset.name`)
	if first != "mix" {
		t.Errorf("hottest function %q, want mix", first)
	}
	screenshot(t, ctx, prefix+"-1-loaded")

	// Click a function in the table: the detail, the graph and the
	// selection follow.
	checksum := funcIndex(t, ctx, "checksum")
	run(t, ctx, "clicking checksum", click(`.vrow[data-name="checksum"]`),
		waitFor(fmt.Sprintf(`#detail-name[data-f="%d"]`, checksum)),
		waitFor(`#graph-view g.node.selected[data-name="checksum"]`))
	callers := eval[[][]string](t, ctx, `[...document.querySelectorAll("#detail-callers tbody tr")].map(r => [...r.cells].map(c => c.textContent))`)
	if len(callers) != 1 || callers[0][0] != "process_batch" || callers[0][3] != "100.00%" {
		t.Errorf("checksum's callers %q, want process_batch with 100.00%%", callers)
	}
	callees := eval[[][]string](t, ctx, `[...document.querySelectorAll("#detail-callees tbody tr")].map(r => [...r.cells].map(c => c.textContent))`)
	if len(callees) == 0 || callees[0][0] != "mix" {
		t.Errorf("checksum's callees %q, want mix first", callees)
	}
	screenshot(t, ctx, prefix+"-2-selected")

	// The time filter: End on the slider moves it to 20%, and fewer
	// functions show.
	before := eval[int](t, ctx, `+document.getElementById("graph-view").dataset.nodes`)
	filter0 := eval[string](t, ctx, `document.getElementById("graph-view").dataset.filter`)
	run(t, ctx, "moving the time filter", focus("#graph-filter"), chromedp.KeyEvent(kb.End),
		waitFor(`#graph-view[data-filter="20"]`))
	after := eval[int](t, ctx, `+document.getElementById("graph-view").dataset.nodes`)
	if after >= before || after < 2 {
		t.Errorf("time filter %s%% → 20%%: %d → %d functions, want fewer but some", filter0, before, after)
	}
	screenshot(t, ctx, prefix+"-3-filter20")
	run(t, ctx, "time filter back to 0", focus("#graph-filter"), chromedp.KeyEvent(kb.Home),
		waitFor(`#graph-view[data-filter="0"]`))

	// Arc weighting: none draws every arc alike; linear and logarithmic
	// follow the callee's time.
	run(t, ctx, "weighting none", setSelect("#graph-weight", "none"), waitFor(`#graph-view[data-weighting="none"]`))
	if w := edgeWidths(t, ctx); len(distinct(w)) != 1 {
		t.Errorf("no weighting: widths %v, want all equal", w)
	}
	screenshot(t, ctx, prefix+"-4-weight-none")
	run(t, ctx, "weighting linear", setSelect("#graph-weight", "linear"), waitFor(`#graph-view[data-weighting="linear"]`))
	if w := edgeWidths(t, ctx); len(distinct(w)) < 2 {
		t.Errorf("linear weighting: widths %v, want several", w)
	}
	run(t, ctx, "weighting log", setSelect("#graph-weight", "log"), waitFor(`#graph-view[data-weighting="log"]`))
	if w := edgeWidths(t, ctx); len(distinct(w)) < 2 {
		t.Errorf("logarithmic weighting: widths %v, want several", w)
	}
	screenshot(t, ctx, prefix+"-5-weight-log")

	// Step a node down: process_batch collapsed hides its callees.
	run(t, ctx, "selecting process_batch in the graph", click(`#graph-view g.node[data-name="process_batch"]`),
		waitFor(`#graph-view g.node.selected[data-name="process_batch"]`))
	before = eval[int](t, ctx, `+document.getElementById("graph-view").dataset.nodes`)
	run(t, ctx, "collapsing process_batch", click("#graph-collapse"),
		waitFor(`#graph-view g.node[data-name="process_batch"][data-state="collapsed"]`))
	after = eval[int](t, ctx, `+document.getElementById("graph-view").dataset.nodes`)
	if after >= before {
		t.Errorf("collapsing process_batch: %d → %d functions, want fewer", before, after)
	}
	run(t, ctx, "expanding process_batch", click("#graph-expand"), click("#graph-expand"),
		waitFor(`#graph-view g.node[data-name="process_batch"][data-state="all"]`))

	// Virtual root: checksum's arcs are relative to it.
	run(t, ctx, "making checksum the root", click(`.vrow[data-name="checksum"]`), click("#graph-root"),
		waitFor(fmt.Sprintf(`#graph-view[data-root="%d"]`, checksum)))
	names := eval[[]string](t, ctx, `[...document.querySelectorAll("#graph-view g.node")].map(g => g.dataset.name)`)
	if strings.Contains(strings.Join(names, ","), "transform") {
		t.Errorf("rooted at checksum, the graph shows %v, want no transform", names)
	}
	screenshot(t, ctx, prefix+"-6-root-checksum")
	run(t, ctx, "resetting the root", click("#graph-unroot"), waitFor(`#graph-view[data-root="-1"]`))

	// Source view: hotspots.c with checksum's line in focus and executed
	// lines marked.
	run(t, ctx, "opening the source", click(`#tabs button[data-tab="source"]`),
		waitFor(`#source[data-kind="source"] tr.focus`))
	focusLine := eval[string](t, ctx, `document.querySelector("#source tr.focus").textContent`)
	executed := eval[int](t, ctx, `document.querySelectorAll("#source tr.exec").length`)
	if !strings.Contains(focusLine, "checksum") || executed == 0 {
		t.Errorf("source view: focus line %q, %d executed lines; want checksum's line and some", focusLine, executed)
	}
	screenshot(t, ctx, prefix+"-7-source")

	// Flame graph: clicking parse's frame selects parse everywhere.
	parse := funcIndex(t, ctx, "parse")
	run(t, ctx, "opening the flame graph", click(`#tabs button[data-tab="flame"]`),
		waitFor(`#flame .fl[data-name="parse"]`),
		click(`#flame .fl[data-name="parse"]`),
		waitFor(fmt.Sprintf(`#detail-name[data-f="%d"]`, parse)),
		waitFor(`.vrow.selected[data-name="parse"]`))
	screenshot(t, ctx, prefix+"-8-flame")
	run(t, ctx, "icicle", click(`input[name="flame-dir"][value="icicle"]`), waitFor(`#flame[data-direction="icicle"]`))

	// Timeline: both threads of the example.
	run(t, ctx, "opening the timeline", click(`#tabs button[data-tab="timeline"]`), waitFor(`#timeline g.row`))
	rows := eval[int](t, ctx, `document.querySelectorAll("#timeline g.row").length`)
	if rows != 2 {
		t.Errorf("timeline: %d thread rows, want 2", rows)
	}
	samples := eval[int](t, ctx, `document.querySelectorAll("#timeline rect.smp").length`)
	if samples == 0 {
		t.Errorf("timeline shows no samples")
	}
	screenshot(t, ctx, prefix+"-9-timeline")
}

func distinct(s []string) map[string]bool {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}

func TestBrowserServer(t *testing.T) {
	p := recordHotspots(t)
	ctx := browser(t)
	srv := httptest.NewServer(NewHandler(p, "hotspots"))
	defer srv.Close()
	checkHotspots(t, ctx, srv.URL+"/", "server")
}

func TestBrowserHTMLFile(t *testing.T) {
	p := recordHotspots(t)
	ctx := browser(t)
	path := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(f, p, HTMLOptions{Title: "hotspots"}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, _ := os.Stat(path)
	t.Logf("HTML report: %d bytes", st.Size())
	checkHotspots(t, ctx, "file://"+path, "file")
}

// testPage is one way of showing a profile: served or as an HTML file.
type testPage struct{ name, url string }

// bothPages serves p (stopped when the test ends) and writes its HTML
// file, and returns both pages' URLs.
func bothPages(t *testing.T, p *model.Profile, title string) []testPage {
	t.Helper()
	srv := httptest.NewServer(NewHandler(p, title))
	t.Cleanup(srv.Close)
	path := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(f, p, HTMLOptions{Title: title}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return []testPage{{"server", srv.URL + "/"}, {"file", "file://" + path}}
}

// TestBrowserDisassembly hides the hotspots source: the source view
// falls back to mix's machine code with its samples, from the server and
// from the HTML file.
func TestBrowserDisassembly(t *testing.T) {
	p := recordHotspots(t)
	for i := range p.Locations {
		for j := range p.Locations[i].Frames {
			if strings.HasSuffix(p.Locations[i].Frames[j].File, "hotspots.c") {
				p.Locations[i].Frames[j].File = "/nonexistent/hotspots.c"
			}
		}
	}
	ctx := browser(t)
	for _, tc := range bothPages(t, p, "hotspots without source") {
		run(t, ctx, tc.name+": disassembly of mix", chromedp.Navigate(tc.url), waitFor(`body[data-ready="1"]`),
			click(`.vrow[data-name="mix"]`), click(`#tabs button[data-tab="source"]`),
			waitFor(`#source[data-kind="disasm"] #disasm-table`))
		insns := eval[int](t, ctx, `document.querySelectorAll("#disasm-table tr").length`)
		hot := eval[int](t, ctx, `[...document.querySelectorAll("#disasm-table tr.hot td.s")].reduce((s, td) => s + +td.textContent, 0)`)
		ret := eval[bool](t, ctx, `[...document.querySelectorAll("#disasm-table td.code")].some(td => /^ret/.test(td.textContent))`)
		if insns < 3 || hot == 0 || !ret {
			t.Errorf("%s: mix disassembled to %d instructions, %d samples on them, ret %v; want a function with samples", tc.name, insns, hot, ret)
		}
		screenshot(t, ctx, tc.name+"-disasm")
	}
}

// TestBrowserSourceCoverageNoDebugInfo checks the fig. 9 marks when
// the modules cannot be read (here: a synthetic trace): only the entry
// line of each function tells, executed for a called function, not
// executed for a probed function never called.
func TestBrowserSourceCoverageNoDebugInfo(t *testing.T) {
	src := filepath.Join(t.TempDir(), "prog.c")
	code := "int main(void) {\n\tused();\n}\n\nvoid used(void) {\n\treturn;\n}\n\nvoid unused(void) {\n\treturn;\n}\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	b := modeltest.NewHooks().Thread(1, 1, "prog").Run(1, 1, "0 +main 10 +used 30 -used 45 -main")
	b.Function("unused") // probed, never called
	p := b.Profile()
	lines := map[string]int{"main": 1, "used": 5, "unused": 9}
	for i := 1; i < len(p.Locations); i++ {
		fr := &p.Locations[i].Frames[0]
		fr.File, fr.Line = src, lines[fr.Function]
		p.Probes = append(p.Probes, model.Probe{PID: 1, Function: uint32(i), Address: p.Locations[i].Address})
	}
	ctx := browser(t)
	srv := httptest.NewServer(NewHandler(p, "coverage"))
	defer srv.Close()
	run(t, ctx, "source of used", chromedp.Navigate(srv.URL+"/"), waitFor(`body[data-ready="1"]`),
		click(`.vrow[data-name="used"]`), click(`#tabs button[data-tab="source"]`),
		waitFor(`#source[data-kind="source"] tr.focus`))
	marks := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("#source-table tbody tr")].map(r => [r.dataset.line, r.className.includes("noexec") ? "#" : r.className.includes("exec") ? "|" : ""]))`)
	if marks["1"] != "|" || marks["5"] != "|" || marks["9"] != "#" || marks["2"] != "" {
		t.Errorf("marks %v: want main (1) and used (5) executed, unused (9) not, line 2 unknown", marks)
	}
	calls := eval[string](t, ctx, `document.querySelector('#source-table tr[data-line="5"]').cells[3].textContent`)
	if calls != "1" {
		t.Errorf("used's line shows %q calls, want 1", calls)
	}
	screenshot(t, ctx, "coverage-source")
}

// Command webload measures the HTML report, serve and the exports of a
// large hook trace against issue 12's bar: the page opens in Chromium
// in under 3 s.
//
// The trace is synthesized with trace.Writer (modeltest.WriteCalls, as
// bench/analysis does): one thread whose main calls mid -mids times, mid
// calling leaf twice, 6 events per mid call (60M events by default).
// Then, with the trueprof built from this checkout:
//
//   - `report --format html` and `export --format pprof|folded` are
//     timed -runs times (medians of the wall and user CPU time) with
//     their peak RSS (wait4's ru_maxrss), and `go tool pprof -top` must
//     read the pprof export, the traced calls' calls and wall time;
//   - headless Chromium (DevTools protocol, chromedp) opens the HTML
//     file, then `serve`'s URL, -runs times each, and the time is
//     Chromium's own: the page's performance mark "tp-rendered" (set
//     once the page is drawn), in milliseconds from the start of
//     navigation, so that it covers loading, parsing and rendering.
//
// Usage (from the repository root):
//
//	go run ./bench/webload [-mids 10000000] [-runs 3] [-pages=false]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"trueprof/bench/internal/benchutil"
	"trueprof/internal/calibrate/calfit"
)

func main() {
	mids := flag.Int("mids", 10_000_000, "mid calls of the hook trace (6 events each)")
	runs := flag.Int("runs", 3, "runs of each command and page loads of each kind (medians are reported)")
	pages := flag.Bool("pages", true, "open the pages in Chromium (false: time the commands only)")
	flag.Parse()
	log.SetFlags(0)
	dir, cleanup := benchutil.Workdir("trueprof-bench-webload-")
	defer cleanup()
	bin := benchutil.BuildTrueprof(dir)
	tr := filepath.Join(dir, "hooks.trace")
	benchutil.WriteCallsTrace(tr, *mids)
	fmt.Printf("hook trace: %d mid calls, %d events\n\n", *mids, 6**mids+2)

	html := filepath.Join(dir, "report.html")
	pb := filepath.Join(dir, "prof.pb.gz")
	folded := filepath.Join(dir, "folded.txt")
	fmt.Printf("%-40s %10s %10s %10s\n", "command (median of runs)", "time (ms)", "user (ms)", "peak RSS")
	for _, c := range [][]string{
		{"report", "--format", "html", "-o", html},
		{"export", "--format", "pprof", "-o", pb},
		{"export", "--format", "folded", "-o", folded},
	} {
		var walls, users []time.Duration
		var rss int64
		for range *runs {
			u := benchutil.Measure(nil, append([]string{bin}, append(c, "-i", tr)...)...)
			walls, users, rss = append(walls, u.Wall), append(users, u.User), max(rss, u.PeakKiB)
		}
		fmt.Printf("%-40s %10.0f %10.0f %7d MB\n", strings.Join(c[:3], " "), benchutil.MS(calfit.Median(walls)),
			benchutil.MS(calfit.Median(users)), rss/1024)
	}
	st, _ := os.Stat(html)
	fmt.Printf("\nHTML file: %d bytes\n", st.Size())
	// The exports carry the traced calls: go tool pprof must read them,
	// with the calls and the wall time of each function.
	for _, index := range []string{"calls", "wall"} {
		top := benchutil.Output("go", "tool", "pprof", "-top", "-sample_index="+index, pb)
		fmt.Printf("go tool pprof -top -sample_index=%s %s:\n%s\n", index, filepath.Base(pb), top)
	}
	if !*pages {
		return
	}

	ctx, stop := browser()
	defer stop()
	file := load(ctx, "file://"+html, *runs)

	srv := exec.Command(bin, "serve", "-i", tr)
	out, err := srv.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { srv.Process.Signal(os.Interrupt); srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		log.Fatalf("serve: %v", err)
	}
	ready := time.Since(start)
	url := line[strings.LastIndex(line, " ")+1 : len(line)-1]
	served := load(ctx, url, *runs)
	fmt.Printf("serve: URL printed after %.0f ms (the page's data are computed first)\n", benchutil.MS(ready))
	bar := func(ok bool, format string, args ...any) {
		verdict := "FAIL"
		if ok {
			verdict = "PASS"
		}
		fmt.Printf("%s  "+format+"\n", append([]any{verdict}, args...)...)
	}
	bar(file < 3000, "HTML report opens in Chromium in %.0f ms (median of %d; bar 3000 ms)", file, *runs)
	bar(served < 3000, "serve's page opens in Chromium in %.0f ms (median of %d; bar 3000 ms)", served, *runs)
}

// browser starts headless Chromium.
func browser() (context.Context, func()) {
	path, err := exec.LookPath("chromium")
	if err != nil {
		log.Fatal("chromium not found (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1600, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 5*time.Minute)
	return ctx, func() { cancelTime(); cancelTab(); cancelAlloc() }
}

// load opens url runs times and returns the median of Chromium's time
// from the start of navigation to the page's "tp-rendered" mark, in ms.
func load(ctx context.Context, url string, runs int) float64 {
	var ms []float64
	for range runs {
		for _, a := range []chromedp.Action[chromedp.Void]{chromedp.Navigate("about:blank"), chromedp.Navigate(url),
			chromedp.WaitReady(chromedp.CSS(`body[data-ready="1"]`))} {
			if _, err := chromedp.Run(ctx, a); err != nil {
				log.Fatalf("%s: %v", url, err)
			}
		}
		v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`performance.getEntriesByName("tp-rendered")[0].startTime`))
		if err != nil {
			log.Fatalf("%s: %v", url, err)
		}
		ms = append(ms, v)
	}
	fmt.Printf("%s: %v ms\n", url, ms)
	return calfit.Median(ms)
}

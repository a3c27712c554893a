package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"trueprof/internal/testutil"
)

// TestServeAndHTMLReport records the example, writes the HTML report and
// serves the UI: the server prints a loopback URL, answers GET only, and
// stops on Ctrl-C.
func TestServeAndHTMLReport(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	tr := filepath.Join(dir, "hs.trace")
	if out, err := exec.Command(trueprof(), "record", "-o", tr, "--", hotspots(t), "200").CombinedOutput(); err != nil {
		t.Fatalf("record: %v\n%s", err, out)
	}

	html := filepath.Join(dir, "report.html")
	if out, err := exec.Command(trueprof(), "report", "-i", tr, "--format", "html", "-o", html).CombinedOutput(); err != nil {
		t.Fatalf("report --format html: %v\n%s", err, out)
	}
	b, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(b), `id="tp-data"`) || !strings.Contains(string(b), "checksum") {
		t.Fatalf("report.html: %v, %d bytes without the inlined data", err, len(b))
	}
	// --thread chooses the threads the page opens with.
	if out, err := exec.Command(trueprof(), "report", "-i", tr, "--format", "html", "--thread", "hots*", "-o", html).CombinedOutput(); err != nil {
		t.Fatalf("report --format html --thread hots*: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), `"selection":{"label":"thread \"hots*\"","threads":[0,1]}`) {
		t.Errorf("report.html with --thread hots*: %v, no selection of both threads", err)
	}
	if out, err := exec.Command(trueprof(), "report", "-i", tr, "--format", "html", "--thread", "nomatch", "-o", html).CombinedOutput(); err == nil || !strings.Contains(string(out), "no thread") {
		t.Errorf("report --format html --thread nomatch: %v %s, want an error", err, out)
	}
	if out, err := exec.Command(trueprof(), "report", "-i", tr, "--format", "json", "-o", filepath.Join(dir, "r.json")).CombinedOutput(); err != nil {
		t.Fatalf("report -o r.json: %v\n%s", err, out)
	}

	cmd := exec.Command(trueprof(), "serve", "-i", tr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed nothing: %v", err)
	}
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(line)
	if url == "" {
		t.Fatalf("serve said %q: want a loopback URL", line)
	}
	resp, err := http.Get(url + "data.json")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET data.json: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, err = http.Post(url, "text/plain", strings.NewReader("x"))
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v, want 405", err, resp)
	}
	if resp != nil {
		resp.Body.Close()
	}
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after Ctrl-C: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop on Ctrl-C")
	}
}

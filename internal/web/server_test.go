package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// fixtureWithSource returns the modeltest fixture with one location's
// file pointing at a real file in a temporary directory, plus names of
// files the trace names that are dangerous or missing.
func fixtureWithSource(t *testing.T) (p *model.Profile, src string) {
	t.Helper()
	p = modeltest.Fixture()
	dir := t.TempDir()
	src = filepath.Join(dir, "compute.c")
	if err := os.WriteFile(src, []byte("int compute(void) {\n\treturn 42;\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Locations[1].Frames[0].File = src
	p.Locations[2].Frames[0].File = "../../../../../../etc/passwd"
	p.Locations[3].Frames[0].File = filepath.Join(dir, "missing.c")
	p.Locations[4].Frames[0].File = dir // a directory
	return p, src
}

func get(t *testing.T, h http.Handler, method, target, host string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	if host != "" {
		r.Host = host
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestServerSecurity(t *testing.T) {
	p, src := fixtureWithSource(t)
	h := NewHandler(p, "fixture")
	const lo = "127.0.0.1:8080"
	for _, tc := range []struct {
		name, method, target, host string
		code                       int
		body                       string // substring of a 200 body
	}{
		{"page", "GET", "/", lo, 200, "<title>fixture</title>"},
		{"page on localhost", "GET", "/", "localhost:9", 200, ""},
		{"page on ::1", "HEAD", "/", "[::1]:9", 200, ""},
		{"data", "GET", "/data.json", lo, 200, `"kind":"sampling"`},
		{"viz", "GET", "/viz.js", lo, 200, "Viz.js"},
		{"named source", "GET", "/source?file=" + url.QueryEscape(src), lo, 200, "return 42"},
		{"traversal", "GET", "/source?file=../../etc/passwd", lo, 403, ""},
		{"traversal named by the trace", "GET", "/source?file=" + url.QueryEscape("../../../../../../etc/passwd"), lo, 403, ""},
		{"absolute not named", "GET", "/source?file=/etc/passwd", lo, 403, ""},
		{"encoded traversal", "GET", "/source?file=%2e%2e%2f%2e%2e%2fetc%2fpasswd", lo, 403, ""},
		{"named but missing", "GET", "/source?file=" + url.QueryEscape(filepath.Join(filepath.Dir(src), "missing.c")), lo, 404, ""},
		{"named but a directory", "GET", "/source?file=" + url.QueryEscape(filepath.Dir(src)), lo, 404, ""},
		// The mux cleans the path and redirects to /etc/passwd, a 404.
		{"path traversal in the path", "GET", "/../../etc/passwd", lo, 307, ""},
		{"unknown path", "GET", "/etc/passwd", lo, 404, ""},
		{"disasm of a fake module", "GET", "/disasm?fn=0", lo, 404, ""},
		{"disasm bad index", "GET", "/disasm?fn=99999", lo, 404, ""},
		{"disasm no index", "GET", "/disasm?fn=x", lo, 400, ""},
		{"POST", "POST", "/", lo, 405, ""},
		{"PUT", "PUT", "/source?file=x", lo, 405, ""},
		{"DELETE", "DELETE", "/data.json", lo, 405, ""},
		{"foreign host (DNS rebinding)", "GET", "/data.json", "evil.example:8080", 403, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := get(t, h, tc.method, tc.target, tc.host)
			if w.Code != tc.code {
				t.Fatalf("%s %s: status %d, want %d (%s)", tc.method, tc.target, w.Code, tc.code, w.Body)
			}
			if tc.code == 200 && !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
			if strings.Contains(w.Body.String(), "root:x:0:0") {
				t.Errorf("served /etc/passwd")
			}
		})
	}
}

func TestServeDefaultsToLoopback(t *testing.T) {
	p := modeltest.Fixture()
	ctx, cancel := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, "", p, "fixture", func(u string) { urls <- u }) }()
	var u string
	select {
	case u = <-urls:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not start")
	}
	if !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("URL %s: want loopback", u)
	}
	resp, err := http.Get(u + "data.json")
	if err != nil {
		t.Fatal(err)
	}
	var d Data
	err = json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if err != nil || !d.Server || len(d.Threads) != 3 {
		t.Errorf("data.json: err %v, server %v, %d threads", err, d.Server, len(d.Threads))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
	if _, err := http.Get(u); err == nil {
		t.Errorf("server still answers after its context ended")
	}
}

func TestWriteHTMLIsSelfContained(t *testing.T) {
	p, _ := fixtureWithSource(t)
	var b strings.Builder
	if err := WriteHTML(&b, p, HTMLOptions{Title: "fixture"}); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{`id="tp-data"`, "Viz.js 3.31.0", "return 42"} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	// Nothing is loaded from anywhere: no src= or href= to fetch.
	for _, bad := range []string{"<script src", "<link ", "<img "} {
		if i := strings.Index(html, bad); i >= 0 {
			t.Errorf("HTML loads a resource: %q", html[i:min(len(html), i+80)])
		}
	}
	if strings.Contains(html, "root:x:0:0") {
		t.Errorf("HTML inlined /etc/passwd through a traversing file name")
	}
}

package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"trueprof/internal/model"
)

// DefaultAddr is where Serve listens unless told otherwise: loopback
// only, any free port. A profile shows function names, source files and
// code, which are not for the network to see.
const DefaultAddr = "127.0.0.1:0"

// Handler serves the UI of one profile. It answers only GET and HEAD,
// never writes files, and reads only the source files the trace's
// locations name and the ELF modules they are in:
//
//	/            the page
//	/data.json   the page's data (Data)
//	/viz.js      the Graphviz layout engine
//	/source      ?file=NAME: a source file the trace names (403 for any other)
//	/disasm      ?fn=N: the disassembly of function N of data.json
type Handler struct {
	p *model.Profile // the trace's tables (and records, when loaded)
	// build computes the page's data: Build or BuildStream.
	build   func() (*Data, error)
	title   string
	allowed map[string]bool
	mux     *http.ServeMux
	// anyHost turns off the Host check, for a server deliberately
	// listening beyond loopback.
	anyHost bool

	once sync.Once
	data *Data
	blob []byte
	err  error
}

// NewHandler returns a Handler for p; title names the page (the trace
// file, typically). The data are computed on the first request.
func NewHandler(p *model.Profile, title string) *Handler {
	return newHandler(p, title, func() (*Data, error) { return Build(p, title) })
}

// NewStreamHandler is NewHandler for a trace read in two passes
// (BuildStream): the handler holds the page's data, never the records.
func NewStreamHandler(s *model.Stream, title string) *Handler {
	return newHandler(s.Profile, title, func() (*Data, error) { return BuildStream(s, title) })
}

func newHandler(p *model.Profile, title string, build func() (*Data, error)) *Handler {
	h := &Handler{p: p, build: build, title: title, allowed: allowedFiles(p), mux: http.NewServeMux()}
	h.mux.HandleFunc("/{$}", h.page)
	h.mux.HandleFunc("/data.json", h.dataJSON)
	h.mux.HandleFunc("/viz.js", h.viz)
	h.mux.HandleFunc("/source", h.source)
	h.mux.HandleFunc("/disasm", h.disasm)
	return h
}

// ServeHTTP refuses anything but GET and HEAD, and requests whose Host
// is not a loopback name when the server listens on loopback (a page on
// another site could otherwise reach it by DNS rebinding).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "read-only server: only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	if !h.anyHost && !loopbackHost(r.Host) {
		http.Error(w, "forbidden host", http.StatusForbidden)
		return
	}
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	// The page is self-contained: nothing may be fetched from elsewhere.
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self' data:")
	h.mux.ServeHTTP(w, r)
}

// loopbackHost reports whether a Host header names this machine:
// localhost or a loopback address, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (h *Handler) load() (*Data, []byte, error) {
	h.once.Do(func() {
		h.data, h.err = h.build()
		if h.err == nil {
			h.data.Server = true
			h.blob, h.err = json.Marshal(h.data)
		}
	})
	return h.data, h.blob, h.err
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := renderPage(&b, page{Title: h.title, VizURL: "viz.js", DataURL: "data.json"}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b.Bytes())
}

func (h *Handler) dataJSON(w http.ResponseWriter, r *http.Request) {
	_, blob, err := h.load()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(blob)
}

func (h *Handler) viz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/javascript")
	w.Header().Set("Cache-Control", "max-age=86400")
	w.Write(asset("viz/viz-global.js"))
}

func (h *Handler) source(w http.ResponseWriter, r *http.Request) {
	text, err := readSource(h.allowed, r.URL.Query().Get("file"))
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, text)
}

func (h *Handler) disasm(w http.ResponseWriter, r *http.Request) {
	d, _, err := h.load()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fn, err := strconv.Atoi(r.URL.Query().Get("fn"))
	if err != nil {
		http.Error(w, "fn: want a function index", http.StatusBadRequest)
		return
	}
	x := newDisassembler(h.p, d)
	defer x.Close()
	dis, err := x.disassemble(fn)
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(dis)
}

func httpError(w http.ResponseWriter, err error) {
	code := http.StatusNotFound
	if errors.Is(err, ErrForbidden) {
		code = http.StatusForbidden
	}
	http.Error(w, err.Error(), code)
}

// Serve serves p's UI on addr (DefaultAddr when empty) until ctx is done.
// ready, when not nil, gets the page's URL once the server listens: the
// command prints it; nothing is opened.
func Serve(ctx context.Context, addr string, p *model.Profile, title string, ready func(url string)) error {
	return serve(ctx, addr, NewHandler(p, title), ready)
}

// ServeStream is Serve for a trace read in two passes: the page's data
// are computed (BuildStream) before the server listens, so that the
// page opens at once and an error (a trace that cannot stream wraps
// model.ErrNotStreamable) comes before any URL.
func ServeStream(ctx context.Context, addr string, s *model.Stream, title string, ready func(url string)) error {
	h := NewStreamHandler(s, title)
	if _, _, err := h.load(); err != nil {
		return err
	}
	return serve(ctx, addr, h, ready)
}

// serve serves h on addr until ctx is done.
func serve(ctx context.Context, addr string, h *Handler, ready func(url string)) error {
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		h.anyHost = true
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if ready != nil {
		ready(fmt.Sprintf("http://%s/", ln.Addr()))
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shut)
		return nil
	}
}

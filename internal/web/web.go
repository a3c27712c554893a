package web

import (
	"bytes"
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"os"
	"slices"

	"trueprof/internal/model"
)

// assets are the page's files. The page is plain JavaScript and CSS: no
// build step, so the repository needs no node toolchain.
//
//go:embed assets
var assets embed.FS

// scripts are the page's own scripts in load order: each defines one
// part of the global TP namespace that the later ones use.
var scripts = []string{"model.js", "util.js", "table.js", "detail.js", "graph.js", "flame.js", "source.js", "timeline.js", "app.js"}

var pageTemplate = template.Must(template.ParseFS(assets, "assets/page.html"))

// page is what the page template needs.
type page struct {
	Title string
	CSS   template.CSS
	JS    template.JS
	// Viz is the inlined Graphviz script (HTML file), or empty when the
	// page loads it from VizURL (server).
	Viz    template.JS
	VizURL string
	// Data is the inlined data blob (HTML file), or empty when the page
	// fetches DataURL (server).
	Data    template.JS
	DataURL string
}

// asset returns an embedded asset's contents.
func asset(name string) []byte {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic(err) // the embedded files are fixed at build time
	}
	return b
}

// appJS concatenates the page's scripts.
func appJS() template.JS {
	var b bytes.Buffer
	for _, s := range scripts {
		b.Write(asset(s))
		b.WriteString("\n")
	}
	return template.JS(b.String())
}

func renderPage(w io.Writer, pg page) error {
	pg.CSS = template.CSS(asset("style.css"))
	pg.JS = appJS()
	return pageTemplate.Execute(w, pg)
}

// HTMLOptions bound what the HTML file inlines.
type HTMLOptions struct {
	// Title is the page title; default "trueprof".
	Title string
	// MaxSourceBytes bounds the source files inlined, in total (default
	// 32 MiB): beyond it functions fall back to disassembly or nothing.
	MaxSourceBytes int
	// MaxDisasm bounds how many functions get a disassembly inlined
	// (default 500), the hottest first.
	MaxDisasm int
	// Filter, when set, is the page's initial thread selection (the
	// --pid, --tid and --thread of report); FilterLabel describes it
	// (default: Filter.String()).
	// The page still holds every thread: its selector can change it.
	Filter      model.Filter
	FilterLabel string
}

// WriteHTML writes the whole UI for p as one self-contained HTML file:
// data, scripts, styles and the Graphviz layout engine inlined, the
// source files the trace names (when readable) and the disassembly of
// the hottest functions without source, so it works offline and can be
// mailed or archived with the trace. WriteHTMLStream does the same
// without holding the records.
func WriteHTML(w io.Writer, p *model.Profile, o HTMLOptions) error {
	o, err := o.defaults()
	if err != nil {
		return err
	}
	d, err := Build(p, o.Title)
	if err != nil {
		return err
	}
	return writeHTML(w, p, d, o)
}

// WriteHTMLStream is WriteHTML for a trace read in two passes: the
// page's data come from one pass over its records (BuildStream), none of
// which is kept. A trace that cannot stream gives an error wrapping
// model.ErrNotStreamable before anything is written.
func WriteHTMLStream(w io.Writer, s *model.Stream, o HTMLOptions) error {
	o, err := o.defaults()
	if err != nil {
		return err
	}
	d, err := BuildStream(s, o.Title)
	if err != nil {
		return err
	}
	return writeHTML(w, s.Profile, d, o)
}

// defaults fills o's unset bounds and refuses what the page cannot
// show.
func (o HTMLOptions) defaults() (HTMLOptions, error) {
	if o.Title == "" {
		o.Title = "trueprof"
	}
	if o.MaxSourceBytes == 0 {
		o.MaxSourceBytes = 32 << 20
	}
	if o.MaxDisasm == 0 {
		o.MaxDisasm = 500
	}
	if len(o.Filter.Labels) > 0 {
		// The page's data is per thread, not per goroutine and label.
		return o, errors.New("the HTML report cannot filter by goroutine label (--label); use the text or JSON reports")
	}
	return o, nil
}

// writeHTML writes the page of d, the data of p's trace.
func writeHTML(w io.Writer, p *model.Profile, d *Data, o HTMLOptions) error {
	if o.Filter.HasPID || o.Filter.HasTID || o.Filter.Thread != "" {
		if o.FilterLabel == "" {
			o.FilterLabel = o.Filter.String()
		}
		if err := d.Select(o.Filter, o.FilterLabel); err != nil {
			return err
		}
	}
	inlineSources(p, d, o)
	blob, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return renderPage(w, page{Title: o.Title, Viz: template.JS(asset("viz/viz-global.js")), Data: template.JS(blob)})
}

// inlineSources fills d.Sources with the readable files the functions
// name, and d.Disasm for the hottest functions without one.
func inlineSources(p *model.Profile, d *Data, o HTMLOptions) {
	allowed := allowedFiles(p)
	d.Sources = map[string]string{}
	d.Disasm = map[int]*Disassembly{}
	budget := o.MaxSourceBytes
	have := map[int]bool{}
	for fi, name := range d.Files {
		if !allowed[name] {
			continue
		}
		if st, err := os.Stat(name); err != nil || int(st.Size()) > budget {
			continue
		}
		if s, err := readSource(allowed, name); err == nil {
			d.Sources[name] = s
			budget -= len(s)
			have[fi] = true
		}
	}
	// Functions in the trees by self (first metric), hottest first.
	self := make([]float64, len(d.Funcs.Name))
	present := make([]bool, len(d.Funcs.Name))
	for i, f := range d.Nodes.Func {
		if f >= 0 {
			self[f] += d.Nodes.Base[0][i]
			present[f] = true
		}
	}
	order := make([]int, 0, len(self))
	for i, ok := range present {
		if ok && (d.Funcs.File[i] < 0 || !have[d.Funcs.File[i]]) {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Or(cmp.Compare(self[b], self[a]), cmp.Compare(a, b)) })
	x := newDisassembler(p, d)
	defer x.Close()
	for _, fn := range order[:min(len(order), o.MaxDisasm)] {
		if dis, err := x.disassemble(fn); err == nil {
			d.Disasm[fn] = dis
		}
	}
}

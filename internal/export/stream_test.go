package export

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// TestStreamEqualsLoaded: the exports of every trace fixture read as a
// stream (the samples grouped in one pass over the records) are the
// loaded trace's, byte for byte, with and without a thread filter; a
// label filter is refused with model.ErrNotStreamable.
func TestStreamEqualsLoaded(t *testing.T) {
	files, _ := filepath.Glob("../trace/testdata/*.trace")
	if len(files) == 0 {
		t.Fatal("no trace fixtures")
	}
	type exporter struct {
		name   string
		loaded func(*bytes.Buffer, *model.Profile, model.Filter) error
		stream func(*bytes.Buffer, *model.Stream, model.Filter) error
	}
	exporters := []exporter{
		{"pprof", func(b *bytes.Buffer, p *model.Profile, f model.Filter) error { return PPROF(b, p, f) },
			func(b *bytes.Buffer, s *model.Stream, f model.Filter) error { return PPROFStream(b, s, f) }},
		{"folded", func(b *bytes.Buffer, p *model.Profile, f model.Filter) error { return Folded(b, p, f) },
			func(b *bytes.Buffer, s *model.Stream, f model.Filter) error { return FoldedStream(b, s, f) }},
	}
	compared := 0
	for _, path := range files {
		for _, f := range []model.Filter{{}, {Thread: "*"}, {TID: 1, HasTID: true}} {
			for _, x := range exporters {
				p, s := modeltest.OpenBoth(t, path)
				var lb, sb bytes.Buffer
				if err := x.loaded(&lb, p, f); err != nil {
					t.Fatal(err)
				}
				err := x.stream(&sb, s, f)
				if errors.Is(err, model.ErrNotStreamable) {
					continue
				}
				if err != nil {
					t.Fatalf("%s %s %+v: %v", filepath.Base(path), x.name, f, err)
				}
				compared++
				if !bytes.Equal(lb.Bytes(), sb.Bytes()) {
					t.Errorf("%s %s %+v: the streamed export differs (%d and %d bytes)", filepath.Base(path), x.name, f, lb.Len(), sb.Len())
				}
			}
		}
	}
	if compared == 0 {
		t.Error("no export streamed")
	}
	_, s := modeltest.OpenBoth(t, files[0])
	var b bytes.Buffer
	if err := PPROFStream(&b, s, model.Filter{Labels: []string{"k=v"}}); !errors.Is(err, model.ErrNotStreamable) || b.Len() > 0 {
		t.Errorf("a label filter: %v after %d bytes, want model.ErrNotStreamable before any", err, b.Len())
	}
}

package resolve

import (
	"bytes"
	"io"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// newResolver returns a Resolver writing a trace into the returned buffer.
func newResolver(t *testing.T, log io.Writer, opts Options) (*Resolver, *bytes.Buffer, *trace.Writer) {
	t.Helper()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Event: "cpu-clock"}, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return New(w, log, opts), &buf, w
}

// load ends and closes the trace of w and reads it back from buf.
func load(t *testing.T, buf *bytes.Buffer, w *trace.Writer) *model.Profile {
	t.Helper()
	if err := w.Write(&trace.End{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := model.Load(buf)
	if err != nil || p.Err != nil {
		t.Fatalf("%v %v", err, p.Err)
	}
	return p
}

package modeltest

import (
	"os"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// TraceFile is a trace file a test writes record by record, for the
// readers of files (model.OpenStream, model.Open): a failed write fails
// the test.
type TraceFile struct {
	t testing.TB
	f *os.File
	w *trace.Writer
}

// NewTraceFile creates the trace file path with header h, in normal mode,
// and writes a location for each of functions, ids 1, 2, ... in order,
// in the module /usr/bin/app.
func NewTraceFile(t testing.TB, path string, h *trace.Header, functions ...string) *TraceFile {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := trace.NewWriter(f, h, trace.Options{Mode: trace.ModeNormal})
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	tf := &TraceFile{t: t, f: f, w: w}
	mod := tf.Intern("/usr/bin/app")
	for i, name := range functions {
		tf.Write(&trace.Location{ID: uint32(i + 1), Address: 0x401000 + uint64(i)*0x40, Module: mod,
			Offset: 0x1000 + uint64(i)*0x40, Lines: []trace.Line{{Function: tf.Intern(name)}}})
	}
	return tf
}

// Write writes the records rs.
func (tf *TraceFile) Write(rs ...trace.Record) {
	tf.t.Helper()
	for _, r := range rs {
		if err := tf.w.Write(r); err != nil {
			tf.t.Fatal(err)
		}
	}
}

// Intern returns the string id of s.
func (tf *TraceFile) Intern(s string) uint32 {
	tf.t.Helper()
	id, err := tf.w.Intern(s)
	if err != nil {
		tf.t.Fatal(err)
	}
	return id
}

// Close ends the trace with an End record at time end and closes the
// file.
func (tf *TraceFile) Close(end uint64) {
	tf.t.Helper()
	tf.Write(&trace.End{Time: end, Reason: tf.Intern("exited")})
	if err := tf.w.Close(); err != nil {
		tf.t.Fatal(err)
	}
	if err := tf.f.Close(); err != nil {
		tf.t.Fatal(err)
	}
}

// OpenBoth reads the trace file path both ways: loaded (model.Open) and
// as a stream (model.OpenStream), for tests that hold the one to the
// other.
func OpenBoth(t testing.TB, path string) (*model.Profile, *model.Stream) {
	t.Helper()
	p, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := model.OpenStream(path)
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

// Matcher compiles f, failing the test if its patterns are bad: the
// filter tests hand calltree.Options.
func Matcher(t testing.TB, f model.Filter) *model.Matcher {
	t.Helper()
	m, err := f.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

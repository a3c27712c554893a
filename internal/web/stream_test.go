package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// TestBuildStreamEqualsBuild: the page's data of every trace fixture
// read as a stream (one pass over its records, none kept) are the data
// of the loaded trace, byte for byte in JSON; so is the HTML file. A
// trace the stream refuses (wrap mode's late samples) is refused with
// model.ErrNotStreamable.
func TestBuildStreamEqualsBuild(t *testing.T) {
	files, _ := filepath.Glob("../trace/testdata/*.trace")
	if len(files) == 0 {
		t.Fatal("no trace fixtures")
	}
	// An instrumented trace too: main calls mid 100 times, mid calls
	// leaf twice.
	calls := filepath.Join(t.TempDir(), "calls.trace")
	f, err := os.Create(calls)
	if err != nil {
		t.Fatal(err)
	}
	if err := modeltest.WriteCalls(f, 100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	files = append(files, calls)
	streamed := 0
	for _, path := range files {
		p, s := modeltest.OpenBoth(t, path)
		want, err := Build(p, "t")
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		got, err := BuildStream(s, "t")
		if errors.Is(err, model.ErrNotStreamable) {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		streamed++
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		if !bytes.Equal(wj, gj) {
			t.Errorf("%s: streamed data differ:\n--- loaded\n%s\n--- streamed\n%s", filepath.Base(path), wj, gj)
		}
		var lh, sh bytes.Buffer
		if err := WriteHTML(&lh, p, HTMLOptions{Title: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := WriteHTMLStream(&sh, s, HTMLOptions{Title: "t"}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(lh.Bytes(), sh.Bytes()) {
			t.Errorf("%s: the streamed HTML file differs (%d and %d bytes)", filepath.Base(path), lh.Len(), sh.Len())
		}
	}
	t.Logf("%d of %d traces streamed", streamed, len(files))
	if streamed < len(files)-1 {
		t.Errorf("only %d of %d traces streamed", streamed, len(files))
	}
}

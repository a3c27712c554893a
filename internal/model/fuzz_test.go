package model

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load, seeded with the trace package's
// fixtures: it must never panic, and every stack it returns must be
// walkable (parents before children, locations defined), and reading it
// as a Stream gives the same profile.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob("../trace/testdata/*.trace")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Load(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, s := range p.Samples {
			for _, loc := range p.Stack(s.Stack, nil) {
				if int(loc) >= len(p.Locations) || len(p.Locations[loc].Frames) == 0 {
					t.Fatalf("sample refers to bad location %d", loc)
				}
			}
		}
		for _, hold := range []int{0, maxHeld} {
			if _, got, err := streamed(t, data, hold); err == nil && !reflect.DeepEqual(got, p) {
				t.Fatalf("hold %d: the stream differs from Load:\n got %+v\nwant %+v", hold, got, p)
			}
		}
	})
}

package web

import (
	"bytes"
	"encoding/json"
	"testing"

	"trueprof/internal/instr/instrtest"
	"trueprof/internal/report"
)

// TestBuildRootRecording: a --root recording's page covers the root's
// call subgraph, as its reports and the page's own header do: calls made
// outside the root (placed probes stay) are not the page's.
func TestBuildRootRecording(t *testing.T) {
	p := instrtest.New().Thread(1, 1, "prog").
		Run(1, 1, "0 +main 10 +b 20 +c 30 -c 40 -b 50 +c 60 -c 70 +c 80 -c 90 -main").Profile()
	p.Header.Root = "b"
	d, err := Build(p, "root")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]uint64{}
	for i, f := range d.Nodes.Func {
		if f >= 0 {
			calls[d.Funcs.Name[f]] += d.Nodes.Calls[i]
		}
	}
	var rep struct {
		Functions []struct {
			Name  string `json:"name"`
			Calls uint64 `json:"calls"`
		} `json:"functions"`
	}
	var b bytes.Buffer
	if err := report.Write(&b, p, report.Options{View: "flat", Format: "json"}); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	for _, f := range rep.Functions {
		want[f.Name] = f.Calls
	}
	if want["c"] != 1 || calls["c"] != want["c"] || calls["b"] != want["b"] || calls["main"] != want["main"] {
		t.Errorf("calls on the page %v, in the flat report %v: want the root b's subgraph (c called once under it)", calls, want)
	}
}

package record

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"trueprof/internal/testutil"
)

// TestTinyCode assembles the sources of the tiny executables
// (testdata/tiny/*.s) with GNU as and compares the machine code with
// the bytes trueprof writes (tiny_amd64.go): the bytes are what their
// comments say, and a change to either shows here.
func TestTinyCode(t *testing.T) {
	as := testutil.RequireCommand(t, "as")
	objcopy := testutil.RequireCommand(t, "objcopy")
	for name, code := range map[string][]byte{"holder": holderCode, "wrapper": wrapperCode} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			obj, bin := filepath.Join(dir, name+".o"), filepath.Join(dir, name+".bin")
			if out, err := exec.Command(as, "--64", "-o", obj, filepath.Join("testdata", "tiny", name+".s")).CombinedOutput(); err != nil {
				t.Fatalf("as: %v\n%s", err, out)
			}
			if out, err := exec.Command(objcopy, "-O", "binary", "-j", ".text", obj, bin).CombinedOutput(); err != nil {
				t.Fatalf("objcopy: %v\n%s", err, out)
			}
			want, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(code, want) {
				t.Errorf("%sCode is not testdata/tiny/%s.s assembled:\n got % x\nwant % x", name, name, code, want)
			}
		})
	}
}

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RunMain runs a package's tests (a TestMain's m.Run) with a temporary
// directory of their own: it makes one named after prefix, passes it to
// setup, runs the tests, removes the directory and exits with the tests'
// status. When setup fails, no test runs and the status is 1.
func RunMain(m *testing.M, prefix string, setup func(dir string) error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := setup(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// BuildTrueprof builds the trueprof command into dir as the README
// installs it (CGO_ENABLED=0 go build) and returns the binary's path.
func BuildTrueprof(dir string) (string, error) {
	bin := filepath.Join(dir, "trueprof")
	cmd := exec.Command("go", "build", "-o", bin, "trueprof/cmd/trueprof")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build trueprof: %v\n%s", err, out)
	}
	return bin, nil
}

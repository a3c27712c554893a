package hook

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"trueprof/internal/cachefile"
	"trueprof/internal/symbolize"
)

// hookSource is the hooks' C source (lib/hook.c).
//
//go:embed lib/hook.c
var hookSource []byte

// calibSource holds the in-run calibration bursts (lib/calib.c), compiled
// after hook.c in the same library: they call its hooks.
//
//go:embed lib/calib.c
var calibSource []byte

// source is the hook library's C source, compiled on the recording
// machine so that the trueprof binary stays pure Go and the library
// matches the local C library.
var source = append(append(append([]byte{}, hookSource...), '\n'), calibSource...)

// EnvCalibrate, set to 1 in a target's environment, makes each process
// image run a calibration burst when the library loads and another when
// it exits (lib/calib.c; package calfit fits them).
const EnvCalibrate = "TRUEPROF_HOOK_CALIBRATE"

// cflags build the library. It must not be instrumented itself; the hooks
// use initial-exec TLS, which a preloaded library may.
var cflags = []string{"-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-ftls-model=initial-exec", "-pthread", "-Wall"}

// compilers are tried in order.
var compilers = []string{"cc", "gcc", "clang"}

// ErrNoCompiler is returned by Library when no C compiler is installed.
var ErrNoCompiler = errors.New("no C compiler (cc, gcc or clang) to build the hook library; install gcc")

var libOnce struct {
	sync.Mutex
	path string
}

// Library returns the path of the hook shared object, building it on
// first use from the embedded C source with the system C compiler into
// the per-user cache directory ($XDG_CACHE_HOME/trueprof or
// ~/.cache/trueprof), under a name keyed by a hash of the source, flags
// and compiler. The file is written to a temporary name and renamed, so
// recorders racing to build it are safe. It fails with ErrNoCompiler when
// there is no compiler.
func Library() (string, error) {
	libOnce.Lock()
	defer libOnce.Unlock()
	if libOnce.path != "" {
		return libOnce.path, nil
	}
	cc := ""
	for _, name := range compilers {
		if p, err := exec.LookPath(name); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		return "", ErrNoCompiler
	}
	dir, err := cachefile.Dir()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(source)
	fmt.Fprintf(h, "\x00%s\x00%s", strings.Join(cflags, " "), cc)
	path := filepath.Join(dir, "hook-"+hex.EncodeToString(h.Sum(nil)[:8])+".so")
	if checkLibrary(path) != nil {
		if err := build(cc, dir, path); err != nil {
			return "", err
		}
	}
	libOnce.path = path
	return path, nil
}

// build compiles the library to a temporary file in dir and renames it
// to path.
func build(cc, dir, path string) error {
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return fmt.Errorf("building the hook library: %w", err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "hook.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return fmt.Errorf("building the hook library: %w", err)
	}
	out := filepath.Join(tmp, "hook.so")
	args := append(append([]string{}, cflags...), "-o", out, src)
	cmd := exec.Command(cc, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the hook library: %s %s: %w\n%s", cc, strings.Join(args, " "), err, msg)
	}
	if err := checkLibrary(out); err != nil {
		return fmt.Errorf("building the hook library: %w", err)
	}
	if err := os.Chmod(out, 0o644); err != nil {
		return err
	}
	return os.Rename(out, path)
}

// checkLibrary verifies that path is a shared object exporting both hooks.
func checkLibrary(path string) error {
	f, err := symbolize.OpenFileOptions(path, symbolize.Options{NoDebugFile: true})
	if err != nil {
		return err
	}
	defer f.Close()
	if !f.Exports(hookEnter) || !f.Exports(hookExit) {
		return fmt.Errorf("%s does not export %s and %s", path, hookEnter, hookExit)
	}
	return nil
}

package record

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// loaderChoice runs exe under ld.so's trace mode (LD_TRACE_LOADED_OBJECTS,
// what ldd does) with env and returns the path ld.so chose for each of
// the libraries named.
func loaderChoice(t *testing.T, exe string, env []string, libs []string) []string {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(env, "LD_TRACE_LOADED_OBJECTS=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s under LD_TRACE_LOADED_OBJECTS: %v\n%s", exe, err, out)
	}
	found := map[string]string{}
	re := regexp.MustCompile(`^\s*(\S+) => (\S+) \(0x`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			found[m[1]] = m[2]
		}
	}
	var paths []string
	for _, lib := range libs {
		paths = append(paths, found[lib])
	}
	return paths
}

// TestNeededLibrariesFollowLdso builds a library twice, in a/ and b/, and
// one more in c/, and executables that find the first through RUNPATH or
// RPATH $ORIGIN/a and the second only through LD_LIBRARY_PATH: the paths
// neededLibraries finds are those ld.so loads (its trace mode is the
// oracle), and the ones the order makes them.
func TestNeededLibrariesFollowLdso(t *testing.T) {
	dir := t.TempDir()
	sub := func(name string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b, c := sub("a"), sub("b"), sub("c")
	lib := func(d, name, fn string) {
		testutil.BuildC(t, d, name, "int "+fn+"(void) { return 1; }\n", "-shared", "-fPIC", "-Wl,-soname,"+name)
	}
	lib(a, "libshadow.so", "shadow")
	lib(b, "libshadow.so", "shadow")
	lib(c, "libonlyenv.so", "onlyenv")
	const main = "int shadow(void); int onlyenv(void); int main(void) { return shadow() + onlyenv() - 2; }\n"
	link := []string{"-L" + a, "-L" + c, "-lshadow", "-lonlyenv", "-Wl,-rpath,$ORIGIN/a"}
	runpath := testutil.BuildC(t, dir, "runpath", main, append(link, "-Wl,--enable-new-dtags")...)
	rpath := testutil.BuildC(t, dir, "rpath", main, append(link, "-Wl,--disable-new-dtags")...)

	libs := []string{"libshadow.so", "libonlyenv.so"}
	for _, tt := range []struct {
		name string
		exe  string
		path string // LD_LIBRARY_PATH
		want []string
	}{
		{"LD_LIBRARY_PATH before RUNPATH", runpath, b + ":" + c, []string{filepath.Join(b, "libshadow.so"), filepath.Join(c, "libonlyenv.so")}},
		{"RUNPATH with $ORIGIN", runpath, c, []string{filepath.Join(a, "libshadow.so"), filepath.Join(c, "libonlyenv.so")}},
		{"RPATH before LD_LIBRARY_PATH", rpath, b + ":" + c, []string{filepath.Join(a, "libshadow.so"), filepath.Join(c, "libonlyenv.so")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := append(os.Environ(), "LD_LIBRARY_PATH="+tt.path)
			got := neededLibraries(tt.exe, env)
			ldso := loaderChoice(t, tt.exe, env, libs)
			if !slices.Equal(ldso, tt.want) {
				t.Fatalf("ld.so loads %v, the test expects %v", ldso, tt.want)
			}
			// libc and the others come from the cache or the default
			// directories: ld.so's choice too.
			all := loaderChoice(t, tt.exe, env, []string{"libshadow.so", "libonlyenv.so", "libc.so.6"})
			if !slices.Equal(got, all) {
				t.Errorf("neededLibraries = %v, ld.so loads %v", got, all)
			}
		})
	}
	// Without LD_LIBRARY_PATH the library only it names is not found,
	// and says nothing of a file that ld.so would not load either.
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "LD_LIBRARY_PATH=") })
	if got := neededLibraries(runpath, env); slices.Contains(got, filepath.Join(c, "libonlyenv.so")) {
		t.Errorf("neededLibraries without LD_LIBRARY_PATH = %v: found libonlyenv.so", got)
	}
}

// TestReadLDCacheMatchesLdconfig reads this machine's ld.so.cache and
// compares it with what ldconfig -p prints of it.
func TestReadLDCacheMatchesLdconfig(t *testing.T) {
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		ldconfig = testutil.RequireFile(t, "/sbin/ldconfig", "libc-bin")
	}
	out, err := exec.Command(ldconfig, "-p").Output()
	if err != nil {
		t.Fatalf("ldconfig -p: %v", err)
	}
	cache, err := readLDCache(ldCachePath)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\s*(\S+) \((libc6[^)]*)\) => (\S+)$`)
	n, total := 0, 0
	for _, line := range strings.Split(string(out), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil || strings.Contains(m[2], "hwcap") {
			continue
		}
		n++
		if !slices.Contains(cache[m[1]], m[3]) {
			t.Errorf("ldconfig -p: %s => %s; readLDCache: %v", m[1], m[3], cache[m[1]])
		}
	}
	for _, paths := range cache {
		total += len(paths)
	}
	if n == 0 || total != n {
		t.Errorf("readLDCache has %d entries, ldconfig -p %d without hwcaps", total, n)
	}
}

// TestParseLDCacheDamaged cuts this machine's cache short and damages
// its counts: each is an error, never a panic or a wrong path.
func TestParseLDCacheDamaged(t *testing.T) {
	b, err := os.ReadFile(ldCachePath)
	if err != nil {
		testutil.Missing(t, fmt.Sprintf("no %s: %v", ldCachePath, err))
	}
	for _, n := range []int{0, 10, 20, 47, 48, 60, len(b) / 2} {
		if _, err := parseLDCache(b[:n]); err == nil {
			t.Errorf("cache cut to %d bytes: no error", n)
		}
	}
	huge := slices.Clone(b)
	huge[20], huge[21], huge[22], huge[23] = 0xff, 0xff, 0xff, 0x7f
	if _, err := parseLDCache(huge); err == nil {
		t.Error("2^31 entries: no error")
	}
	old := append([]byte(ldCacheOldMagic+"\x00\x00\x00\x00\x00"), b...)
	if cache, err := parseLDCache(old); err != nil || len(cache) == 0 {
		t.Errorf("after an empty old-format header: %d sonames, %v", len(cache), err)
	}
}

package testutil

import (
	"bufio"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// PerfChildren returns the inclusive (children) share of each function in
// comm's samples (every process's when comm is empty) of a perf.data
// file, as perf report --children --no-inline computes it, keyed by
// PerfName; rows under 0.5% are left out. With module set (a file's
// base name), only that module's functions. With comm set, the rows are
// sorted by comm too: perf merges a library's rows across processes and
// --comm then keeps or drops the merged row by the first process's name
// (cc1's __libc_start_main was 0% in a gcc build, 99.5% without --comm).
// A function's cold part is a row of the same name ("mid" for mid.cold):
// a sample is in one or the other, so their shares are added.
func PerfChildren(perfBin, data, comm, module string) (map[string]float64, error) {
	args := []string{"report", "-i", data, "--children", "--stdio", "-g", "none", "--no-inline", "--percent-limit", "0.5"}
	if comm != "" {
		// perf leaves out the comm column when --comm keeps one.
		args = append(args, "--sort", "comm,dso,sym", "--comm", comm)
	} else {
		args = append(args, "--sort", "dso,sym")
	}
	out, err := exec.Command(perfBin, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("perf report: %w", err)
	}
	shares := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// "97.24%    40.87%  work  [.] leaf", with a comm column before
		// the dso ("work") when perf shows one: the dso is the field
		// before "[.]" or "[k]".
		f := strings.Fields(sc.Text())
		col := slices.IndexFunc(f, func(s string) bool { return len(s) == 3 && s[0] == '[' && s[2] == ']' }) - 1
		if col < 2 || len(f) < col+3 || !strings.HasSuffix(f[0], "%") || (module != "" && f[col] != module) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64); err == nil {
			shares[PerfName(strings.Join(f[col+2:], " "))] += v
		}
	}
	return shares, nil
}

// PerfName is a function name as perf report prints it, so trueprof's
// names and perf's compare: C++ names without parameters, return type or
// clone suffix ("deep<12>" for "int deep<12>(int)"), without a symbol
// version ("@@GLIBC_2.34", but "@plt" stays) or perf's "(inlined)".
func PerfName(fn string) string {
	fn = strings.TrimSuffix(fn, " (inlined)")
	// The demangler (ianlancetaylor/demangle) drops the first underscore
	// of a legacy Rust name component that starts with two (perf:
	// "__rust_begin_short_backtrace", trueprof "_rust_begin_...").
	fn = strings.ReplaceAll(fn, "::__", "::_")
	if i := strings.Index(fn, " [clone"); i >= 0 {
		fn = fn[:i]
	}
	if i := strings.IndexByte(fn, '@'); i > 0 && !strings.HasSuffix(fn, "@plt") {
		fn = fn[:i]
	}
	// Cut at the parameter list: the first '(' outside template
	// arguments; a space outside them ends a return type.
	depth, start := 0, 0
	for i, c := range fn {
		switch c {
		case '<':
			depth++
		case '>':
			depth--
		case ' ':
			if depth == 0 {
				start = i + 1
			}
		case '(':
			if depth == 0 && i > 0 && !strings.HasSuffix(fn[:i], "operator") {
				return fn[start:i]
			}
		}
	}
	return fn[start:]
}

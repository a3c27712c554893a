package corpus

import (
	"debug/elf"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"trueprof/internal/symbolize"
	"trueprof/internal/testutil"
)

// How the two tools name the same code, and how the corpus makes the names
// comparable:
//
//   - Symbols: trueprof's flat JSON has the bare name and the module's full
//     path; perf's sym column prefixes "[.] " (user) or "[k] " (kernel) and
//     its dso column has the module's base name. Keys are the bare names
//     (the module is left out: a name found in two modules is rare and would
//     be summed on both sides alike).
//   - Demangling: both demangle C++ and Rust, trueprof with
//     ianlancetaylor/demangle, perf with libiberty. Rust's legacy mangling
//     ends in a hash ("::h0123456789abcdef") that one may keep and the
//     other drop: keys drop it.
//   - JIT code: both read the same /tmp/perf-PID.map, so JVM and V8 method
//     names are the strings the runtime wrote; perf's dso for them is
//     "perf-PID.map", trueprof's module "[jit]".
//   - Code without a symbol: perf makes a row per address ("[.]
//     0x0000000000015b23") while trueprof names the function's start from
//     the module's unwind tables ("liblzma.so.5.4.1+0x15ae0"), so neither
//     row matches the other; keys put all of a module's unresolved code in
//     one row, "[unresolved in MODULE]", and all code that is in no file
//     (anonymous or JIT memory without a map entry: trueprof's "[jit]" and
//     "[unknown]", perf's "[unknown]", "perf-PID.map" and "[JIT] tid N"
//     dsos) in "[unresolved anonymous code]".

// unresolvedAnon is the key of code that is in no file and has no name.
const unresolvedAnon = "[unresolved anonymous code]"

func unresolvedIn(module string) string { return "[unresolved in " + module + "]" }

// rustHash is the hash that ends a legacy-mangled Rust symbol;
// symVersion the ELF symbol version perf appends to some dynamic symbols
// ("cfree@GLIBC_2.2.5"), while "@plt", both tools' name for a PLT stub,
// is lower case and stays: a stub is not the function it jumps to; gccClone
// the suffixes trueprof's demangler gives a function gcc cloned to
// specialise it ("f(int) [clone .isra.0]"), which perf's, printing no
// parameters, leaves out. (A C name such as "finish_task_switch.isra.0"
// is not demangled and reads the same in both.)
var (
	rustHash   = regexp.MustCompile(`::h[0-9a-f]{16}$`)
	symVersion = regexp.MustCompile(`@@?[A-Z][A-Za-z0-9_.]*$`)
	gccClone   = regexp.MustCompile(`( \[clone [^\]]*\])+$`)
)

// normName is the comparison key of a resolved function name.
func normName(name string) string {
	name = strings.TrimSpace(name)
	// A PLT stub is named after the function it jumps to, spelled as
	// each tool spells that function's name.
	if target, ok := strings.CutSuffix(name, "@plt"); ok {
		return normName(target) + "@plt"
	}
	name = rustHash.ReplaceAllString(name, "")
	name = symVersion.ReplaceAllString(name, "")
	name = gccClone.ReplaceAllString(name, "")
	return stripSignature(name)
}

// stripSignature removes the parameter list, the qualifiers after it and
// the return type before the name from a demangled C++ (or JVM perf map)
// name: perf demangles without them ("std::sort<...>"), trueprof with the
// parameters ("std::sort<...>(It, It)"), a JVM's perf map with both. Names
// that do not end in a parameter list (C, kernel, node's "JS:*f
// file:1:2") are unchanged.
func stripSignature(name string) string {
	s := name
	for _, q := range []string{" const", " volatile", " &&", " &", " noexcept"} {
		s = strings.TrimSuffix(s, q)
	}
	if !strings.HasSuffix(s, ")") {
		return name
	}
	depth, open := 0, -1
	for i := len(s) - 1; i >= 0 && open < 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			if depth--; depth == 0 {
				open = i
			}
		}
	}
	if open <= 0 {
		return name
	}
	s = s[:open]
	// The return type ends at the last space outside brackets, unless
	// that space belongs to "operator new" and the like.
	depth = 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')', '>', ']', '}':
			depth++
		case '(', '<', '[', '{':
			depth--
		case ' ':
			if depth == 0 && !strings.HasSuffix(s[:i], "operator") {
				return s[i+1:]
			}
		}
	}
	return s
}

// aliases maps the key of every function symbol of the modules to one key
// of its address: the tools may name one function by different symbols
// of the same address ("free" and "cfree" in libc, "__memcpy_avx512_
// unaligned_erms" and "__memmove_avx512_unaligned_erms"). The shortest
// key (then the first in order) stands for all; symbols come from each
// module and from the separate debug file trueprof found for it.
func aliases(modules []string) (map[string]string, error) {
	out := map[string]string{}
	sort.Strings(modules)
	for _, m := range modules {
		if !filepath.IsAbs(m) {
			continue // [kernel.kallsyms], [jit], [vdso], ...
		}
		sf, err := symbolize.OpenFile(m)
		if err != nil {
			return nil, err
		}
		paths := []string{m}
		if d := sf.DebugPath(); d != "" {
			paths = append(paths, d)
		}
		sf.Close()
		byAddr := map[uint64][]string{}
		for _, p := range paths {
			syms, err := funcSymbols(p)
			if err != nil {
				return nil, err
			}
			for _, s := range syms {
				byAddr[s.Value] = append(byAddr[s.Value], normName(symbolize.Demangle(s.Name)))
			}
		}
		for _, names := range byAddr {
			sort.Slice(names, func(i, j int) bool {
				if len(names[i]) != len(names[j]) {
					return len(names[i]) < len(names[j])
				}
				return names[i] < names[j]
			})
			for _, n := range names[1:] {
				if _, ok := out[n]; !ok && n != names[0] {
					out[n] = names[0]
				}
			}
		}
	}
	return out, nil
}

// funcSymbols returns the function symbols with an address in the ELF
// file at path, from .symtab and .dynsym.
func funcSymbols(path string) ([]elf.Symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []elf.Symbol
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// trueprofKey returns the comparison key of a trueprof flat row, and
// false when the row is code without a symbol: "[jit]", "[unknown]" and
// the other bracketed names trueprof gives to code that is not a
// function, or "BASENAME+0xOFFSET".
func trueprofKey(name, module string) (string, bool) {
	anon := module == "" || module == "[jit]" || module == "[unknown]"
	if strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]") {
		if anon {
			return unresolvedAnon, false
		}
		return unresolvedIn(filepath.Base(module)), false
	}
	if base := filepath.Base(module); strings.HasPrefix(name, base+"+0x") {
		return unresolvedIn(base), false
	}
	return normName(name), true
}

// perfAnonDSO matches perf's dsos for code in no file.
var perfAnonDSO = regexp.MustCompile(`^(\[unknown\]|perf-[0-9]+\.map|\[JIT\] tid [0-9]+|//anon|\[anon.*\])$`)

// perfAddr matches perf's name for an address without a symbol.
var perfAddr = regexp.MustCompile(`^0x[0-9a-f]+$`)

// perfKey returns the comparison key of a perf report row.
func perfKey(dso, sym string) string {
	// "[.] name", "[k] name", "[g] name" (guest): the column says where
	// the sample was, the key is the name.
	if len(sym) > 4 && sym[0] == '[' && sym[2] == ']' && sym[3] == ' ' {
		sym = sym[4:]
	}
	if perfAddr.MatchString(sym) || sym == "[unknown]" {
		if perfAnonDSO.MatchString(dso) {
			return unresolvedAnon
		}
		return unresolvedIn(dso)
	}
	return normName(sym)
}

// perfShares returns the self share of each function of perf report's
// rows under its comparison key (through alias).
func perfShares(rows []perfRow, alias map[string]string) map[string]float64 {
	var total uint64
	for _, r := range rows {
		total += r.period
	}
	shares := map[string]float64{}
	for _, r := range rows {
		shares[canonical(alias, perfKey(r.dso, r.sym))] += 100 * float64(r.period) / float64(total)
	}
	return shares
}

// pltShare returns the share of the period that perf charges to PLT
// stubs ("memcpy@plt").
func pltShare(rows []perfRow) float64 {
	var plt, total uint64
	for _, r := range rows {
		total += r.period
		if strings.HasSuffix(r.sym, "@plt") {
			plt += r.period
		}
	}
	return 100 * float64(plt) / float64(max(total, 1))
}

// pltShare returns the share of the period that trueprof charges to PLT
// stubs.
func (r *flatReport) pltShare() float64 {
	var plt uint64
	for _, f := range r.Functions {
		if strings.HasSuffix(f.Name, "@plt") {
			plt += f.Self.Period
		}
	}
	return 100 * float64(plt) / float64(max(r.Total.Period, 1))
}

// childKey is the comparison key of an inclusive share's function: a
// name of perf report --children (already through testutil.PerfName) or
// trueprof's, through testutil.PerfName as TestUnwindCorpus compares
// them, then normName and its aliases as the self shares are.
func childKey(alias map[string]string, fn string) string {
	return canonical(alias, normName(testutil.PerfName(fn)))
}

// canonical returns the key that stands for key and its aliases.
func canonical(alias map[string]string, key string) string {
	if c, ok := alias[key]; ok {
		return c
	}
	return key
}

// perfRow is one row of perf report -F period,dso,sym.
type perfRow struct {
	period   uint64
	dso, sym string
}

// parsePerfReport parses `perf report -q -F period,dso,sym -t "\x1f"`.
func parsePerfReport(out []byte) ([]perfRow, error) {
	var rows []perfRow
	for i, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, "\x1f")
		if len(f) != 3 {
			return nil, fmt.Errorf("perf report line %d: %d fields, want period, dso, sym: %q", i+1, len(f), line)
		}
		p, err := strconv.ParseUint(strings.TrimSpace(f[0]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("perf report line %d: period: %w", i+1, err)
		}
		rows = append(rows, perfRow{period: p, dso: strings.TrimSpace(f[1]), sym: strings.TrimSpace(f[2])})
	}
	return rows, nil
}

// shareRow is one function's self share in both tools, in percent.
type shareRow struct {
	key        string
	ours, perf float64
}

// compare returns the rows of the topN functions of either tool, largest
// first (by the larger of the two shares, then by name).
func compare(ours, perf map[string]float64) []shareRow {
	keys := map[string]bool{}
	for _, m := range []map[string]float64{ours, perf} {
		for _, k := range topKeys(m, topN) {
			keys[k] = true
		}
	}
	var rows []shareRow
	for k := range keys {
		rows = append(rows, shareRow{key: k, ours: ours[k], perf: perf[k]})
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := math.Max(rows[i].ours, rows[i].perf), math.Max(rows[j].ours, rows[j].perf)
		if a != b {
			return a > b
		}
		return rows[i].key < rows[j].key
	})
	return rows
}

// topKeys returns the n keys with the largest shares.
func topKeys(m map[string]float64, n int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys[:min(n, len(keys))]
}

// table formats rows as the test log's evidence: function, trueprof %,
// perf %, difference in points.
func table(rows []shareRow) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "trueprof %\tperf %\tdiff\t\tfunction")
	for _, r := range rows {
		// Long C++ names differ at their ends: keep both.
		name := r.key
		if len(name) > 100 {
			name = name[:45] + " ... " + name[len(name)-50:]
		}
		fmt.Fprintf(w, "%.2f\t%.2f\t%+.2f\t\t%s\n", r.ours, r.perf, r.ours-r.perf, name)
	}
	w.Flush()
	return b.String()
}

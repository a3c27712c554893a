package corpus

import (
	"testing"

	"trueprof/internal/testutil"
)

// TestKeys checks the name normalisation on names the two tools printed
// for the same code in corpus runs (trueprof's flat JSON, perf report's
// dso and sym columns).
func TestKeys(t *testing.T) {
	for _, tt := range []struct {
		label, tpName, tpModule, perfDSO, perfSym, key string
		resolved                                       bool
	}{
		{"C++ parameters and return type",
			"__gnu_cxx::__normal_iterator<unsigned long*, std::vector<unsigned long> > std::__unguarded_partition<__gnu_cxx::__normal_iterator<unsigned long*, std::vector<unsigned long> > >(__gnu_cxx::__normal_iterator<unsigned long*, std::vector<unsigned long> >)", "/tmp/work",
			"work", "[.] std::__unguarded_partition<__gnu_cxx::__normal_iterator<unsigned long*, std::vector<unsigned long> > >",
			"std::__unguarded_partition<__gnu_cxx::__normal_iterator<unsigned long*, std::vector<unsigned long> > >", true},
		{"C++ clone made by gcc",
			"void std::__introsort_loop<long*, long, __gnu_cxx::__ops::_Iter_less_iter>(long*, long*, long, __gnu_cxx::__ops::_Iter_less_iter) [clone .isra.0]", "/tmp/work",
			"work", "[.] std::__introsort_loop<long*, long, __gnu_cxx::__ops::_Iter_less_iter>",
			"std::__introsort_loop<long*, long, __gnu_cxx::__ops::_Iter_less_iter>", true},
		{"kernel clone", "finish_task_switch.isra.0", "[kernel.kallsyms]", "[kernel.kallsyms]", "[k] finish_task_switch.isra.0", "finish_task_switch.isra.0", true},
		{"C++ const method", "std::_Hashtable<int>::_M_find_before_node(unsigned long, int const&) const", "/tmp/work",
			"work", "[.] std::_Hashtable<int>::_M_find_before_node", "std::_Hashtable<int>::_M_find_before_node", true},
		{"C++ empty parameters", "statistics_fini_pass()", "/usr/libexec/gcc/x86_64-linux-gnu/12/cc1",
			"cc1", "[.] statistics_fini_pass", "statistics_fini_pass", true},
		{"operator new", "operator new(unsigned long)", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30",
			"libstdc++.so.6.0.30", "[.] operator new", "operator new", true},
		{"JVM perf map", "long Work.countWords(java.util.Random, int)", "[jit]",
			"perf-1234.map", "[.] long Work.countWords(java.util.Random, int)", "Work.countWords", true},
		{"node perf map", "JS:*sortRound /t/work.js:6:19", "[jit]",
			"perf-1234.map", "[.] JS:*sortRound /t/work.js:6:19", "JS:*sortRound /t/work.js:6:19", true},
		{"Rust legacy hash", "corpus_work::sort_round::h0123456789abcdef", "/t/corpus-work",
			"corpus-work", "[.] corpus_work::sort_round", "corpus_work::sort_round", true},
		{"symbol version", "free", "/usr/lib/x86_64-linux-gnu/libc.so.6",
			"libc.so.6", "[.] free@GLIBC_2.2.5", "free", true},
		{"kernel", "clear_page_erms", "[kernel.kallsyms]", "[kernel.kallsyms]", "[k] clear_page_erms", "clear_page_erms", true},
		{"stripped library", "liblzma.so.5.4.1+0x15ae0", "/usr/lib/x86_64-linux-gnu/liblzma.so.5.4.1",
			"liblzma.so.5.4.1", "[.] 0x0000000000015b23", "[unresolved in liblzma.so.5.4.1]", false},
		{"JIT code without a map entry", "[jit]", "[jit]", "perf-1234.map", "[.] 0x00007f3a2c01f2a0", unresolvedAnon, false},
		{"anonymous code", "[unknown]", "[unknown]", "[unknown]", "[.] 0x00007f3a2c01f2a0", unresolvedAnon, false},
		{"PLT stub", "memcpy@plt", "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6",
			"libsqlite3.so.0.8.6", "[.] memcpy@plt", "memcpy@plt", true},
		{"C++ PLT stub", "operator delete(void*, unsigned long)@plt", "/tmp/work",
			"work", "[.] operator delete@plt", "operator delete@plt", true},
	} {
		key, ok := trueprofKey(tt.tpName, tt.tpModule)
		if key != tt.key || ok != tt.resolved {
			t.Errorf("%s: trueprofKey(%q, %q) = %q, %v; want %q, %v", tt.label, tt.tpName, tt.tpModule, key, ok, tt.key, tt.resolved)
		}
		if key := perfKey(tt.perfDSO, tt.perfSym); key != tt.key {
			t.Errorf("%s: perfKey(%q, %q) = %q; want %q", tt.label, tt.perfDSO, tt.perfSym, key, tt.key)
		}
	}
}

// TestParsePerfReport checks the parser on perf report's output and on
// output it cannot have come from.
func TestParsePerfReport(t *testing.T) {
	rows, err := parsePerfReport([]byte(" 432432432  \x1fliblzma.so.5.4.1 \x1f[.] 0x000000000001692b\n 1001001    \x1f[kernel.kallsyms]\x1f[k] clear_page_erms\n\n"))
	if err != nil || len(rows) != 2 || rows[0].period != 432432432 || rows[1].dso != "[kernel.kallsyms]" || rows[1].sym != "[k] clear_page_erms" {
		t.Errorf("parsePerfReport = %+v, %v", rows, err)
	}
	for _, bad := range []string{"12% libc.so.6 [.] free\n", "x\x1flibc.so.6\x1f[.] free\n"} {
		if _, err := parsePerfReport([]byte(bad)); err == nil {
			t.Errorf("parsePerfReport(%q): no error", bad)
		}
	}
}

// TestAliases checks that two symbols of one address in libc share a key.
func TestAliases(t *testing.T) {
	libc := testutil.RequireFile(t, "/usr/lib/x86_64-linux-gnu/libc.so.6", "libc6")
	al, err := aliases([]string{libc, "[kernel.kallsyms]"})
	if err != nil {
		t.Fatal(err)
	}
	if canonical(al, "cfree") != canonical(al, "free") || canonical(al, "free") != "free" {
		t.Errorf("cfree -> %q, free -> %q; want both free", canonical(al, "cfree"), canonical(al, "free"))
	}
}

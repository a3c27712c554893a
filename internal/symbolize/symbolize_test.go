package symbolize

import (
	"slices"
	"testing"
)

func TestDemangle(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"c", "malloc", "malloc"},
		{"go", "main.(*T).Method", "main.(*T).Method"},
		{"c++ function", "_ZN3geo4areaEll", "geo::area(long, long)"},
		{"c++ overload", "_ZN3geo4areaEd", "geo::area(double)"},
		{"c++ template", "_ZN3geo5twiceIlEET_S1_", "geo::twice<long>(long)"},
		{"c++ template clone", "_ZN3geo5twiceIlEET_S1_.cold", "geo::twice<long>(long) [clone .cold]"},
		{"c++ template returning a function pointer", "_Z1fIiEPFvvET_", "f<int>(int)"},
		{"c++ std::sort loop", "_ZSt16__introsort_loopIN9__gnu_cxx17__normal_iteratorIPiSt6vectorIiSaIiEEEElNS0_5__ops15_Iter_less_iterEEvT_S9_T0_T1_", "std::__introsort_loop<__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, long, __gnu_cxx::__ops::_Iter_less_iter>(__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, __gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, long, __gnu_cxx::__ops::_Iter_less_iter)"},
		{"c++ const method", "_ZNK3geo6Square4sizeEv", "geo::Square::size() const"},
		{"c++ versioned", "_ZNSt9exceptionD2Ev@@GLIBCXX_3.4", "std::exception::~exception()@@GLIBCXX_3.4"},
		{"c++ clone", "_Z3fooi.cold", "foo(int) [clone .cold]"},
		{"rust legacy hash dropped", "_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"},
		{"rust v0", "_RNvCs1234_7mycrate3foo", "mycrate::foo"},
		{"not mangled after all", "_Zfoo", "_Zfoo"},
		{"underscore R C name", "_Rb_tree_insert", "_Rb_tree_insert"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Demangle(tt.in); got != tt.want {
				t.Errorf("Demangle(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFlatten(t *testing.T) {
	shorter := func(a, b span) bool { return smallerSpan(a, b) }
	later := func(a, b span) bool { return a.id > b.id }
	tests := []struct {
		name   string
		in     []span
		better func(a, b span) bool
		want   []span
	}{
		{"empty", nil, shorter, nil},
		{"disjoint unsorted", []span{{20, 30, 1}, {0, 10, 0}}, shorter, []span{{0, 10, 0}, {20, 30, 1}}},
		{"empty spans dropped", []span{{5, 5, 0}, {7, 3, 1}}, shorter, nil},
		{"nested: inner wins, outer resumes", []span{{0, 100, 0}, {10, 20, 1}}, shorter,
			[]span{{0, 10, 0}, {10, 20, 1}, {20, 100, 0}}},
		{"later wins partial overlap", []span{{0, 100, 0}, {50, 150, 1}}, later,
			[]span{{0, 50, 0}, {50, 150, 1}}},
		{"earlier loses to later covering it", []span{{10, 20, 0}, {0, 100, 1}}, later,
			[]span{{0, 100, 1}}},
		{"three levels", []span{{0, 100, 0}, {10, 90, 1}, {20, 30, 2}}, shorter,
			[]span{{0, 10, 0}, {10, 20, 1}, {20, 30, 2}, {30, 90, 1}, {90, 100, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := flatten(slices.Clone(tt.in), tt.better)
			if !slices.Equal(got, tt.want) {
				t.Errorf("flatten(%v) = %v, want %v", tt.in, got, tt.want)
			}
			for _, s := range got {
				if findSpan(got, s.lo) < 0 || findSpan(got, s.hi-1) < 0 {
					t.Errorf("findSpan misses %v", s)
				}
			}
		})
	}
}

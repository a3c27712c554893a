// The C++ fixture of TestUnwindCorpus, built with g++ -O2 (no frame
// pointers, as distributions build): STL containers, std::string, an
// exception thrown and caught every 64 rounds, calls through the PLT
// (memcmp, malloc) and 13 levels of template recursion. It prints its own
// CPU time (/proc/self/schedstat) on stderr for bench/unwind.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

static std::map<std::string, int> table;

__attribute__((noinline)) int leaf(int i) {
	std::string k = std::to_string(i * 7919 % 100003);
	return table[k]++;
}

__attribute__((noinline)) int mid(int i) {
	int s = 0;
	for (int j = 0; j < 8; j++)
		s += leaf(i + j);
	if (i % 64 == 0)
		throw std::runtime_error("round " + std::to_string(i));
	return s;
}

template <int N> __attribute__((noinline)) int deep(int i) { return deep<N - 1>(i) + 1; }
template <> int deep<0>(int i) { return mid(i); }

int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 400000;
	long s = 0, caught = 0;
	for (long i = 0; i < n; i++) {
		try {
			s += deep<12>(i);
		} catch (const std::exception &e) {
			caught++;
		}
	}
	printf("%ld %zu %ld\n", s, table.size(), caught);
	if (FILE *f = fopen("/proc/self/schedstat", "r")) {
		unsigned long long ns;
		if (fscanf(f, "%llu", &ns) == 1)
			fprintf(stderr, "target-cpu-ns %llu\n", ns);
		fclose(f);
	}
}

// The corpus's C++ program, built with g++ -O2 -g (frame pointers omitted,
// as -O2 does on x86-64): ROUNDS (its argument) rounds of STL containers, algorithms and
// strings, and exceptions thrown and caught in a loop.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

static long sortRound(std::mt19937_64 &rng, size_t n) {
    std::vector<unsigned long> v(n);
    for (auto &x : v) x = rng();
    std::sort(v.begin(), v.end());
    return long(v[n / 2] & 0xffff);
}

static long countWords(std::mt19937_64 &rng, size_t n) {
    std::unordered_map<std::string, int> counts;
    for (size_t i = 0; i < n; i++) counts["w" + std::to_string(rng() % 5000)]++;
    return long(counts.size());
}

static long ordered(std::mt19937_64 &rng, size_t n) {
    std::map<unsigned long, unsigned long> m;
    for (size_t i = 0; i < n; i++) m[rng() % 100000] += i;
    return long(m.begin()->second & 0xffff);
}

// parse throws on every fourth input: exceptions are part of the workload.
static long parse(unsigned long x) {
    if (x % 4 == 0) throw std::invalid_argument("multiple of four: " + std::to_string(x));
    return long(x % 1000);
}

static long exceptions(std::mt19937_64 &rng, size_t n) {
    long s = 0;
    for (size_t i = 0; i < n; i++) {
        try {
            s += parse(rng());
        } catch (const std::invalid_argument &e) {
            s += long(e.what()[0]);
        }
    }
    return s;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? std::atol(argv[1]) : 20;
    std::mt19937_64 rng(42);
    long sum = 0;
    for (long r = 0; r < rounds; r++) {
        sum += sortRound(rng, 200000);
        sum += countWords(rng, 200000);
        sum += ordered(rng, 200000);
        sum += exceptions(rng, 20000);
    }
    std::printf("sum %ld\n", sum);
}

/* Fixture for the CFA tests, built by the tests at -O1 and -O2, with and
 * without -fno-omit-frame-pointer; their CFA rules are compared with
 * readelf --debug-dump=frames-interp at every address. Each function
 * exercises one shape of prologue. */
#include <stdlib.h>

volatile long sink;

/* A leaf: no frame at all, even with -fno-omit-frame-pointer. */
__attribute__((noinline)) long leaf(long a, long b)
{
	return a * b + (a >> 3);
}

__attribute__((noinline)) void consume(char *p, long n)
{
	sink += p[n];
}

/* A big local array: sub $N,%rsp with N > 4096 (and a stack probe). */
__attribute__((noinline)) long big_frame(long n)
{
	char buf[8192];
	for (long i = 0; i < (long)sizeof buf; i++)
		buf[i] = (char)(i * n);
	consume(buf, n & 8191);
	return buf[(n * 7) & 8191];
}

/* Values live across calls: pushes of callee-saved registers. */
__attribute__((noinline)) long callee_saved(long a, long b, long c, long d)
{
	long x = leaf(a, b), y = leaf(b, c), z = leaf(c, d), w = leaf(d, a);
	long u = leaf(x, y), v = leaf(z, w);
	return a + b + c + d + x + y + z + w + u + v;
}

/* Early returns: several epilogues, described with remember_state and
 * restore_state, and a shrink-wrapped prologue. */
__attribute__((noinline)) long early_exit(long n, long m)
{
	if (n < 0)
		return -1;
	long s = leaf(n, m);
	long t = leaf(m, n);
	if (s == 42)
		return s + t;
	for (long i = 0; i < n; i++)
		s += leaf(s, i) + t;
	if (s & 1)
		return s + leaf(s, m) + t;
	return s - t;
}

/* alloca: a frame pointer even without -fno-omit-frame-pointer, so the
 * CFA moves to %rbp. */
__attribute__((noinline)) long dynamic(long n)
{
	char *p = __builtin_alloca(n + 16);
	for (long i = 0; i < n + 16; i++)
		p[i] = (char)i;
	consume(p, n);
	return p[n / 2];
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100;
	sink = big_frame(n) + callee_saved(n, n + 1, n + 2, n + 3) +
	       early_exit(n, argc) + dynamic(n);
	return 0;
}

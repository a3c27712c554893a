/* Fixture for symbolize tests, built by the tests with
 *   gcc -O2 -g -fno-omit-frame-pointer -o prog prog.c
 * The "L:" markers name lines the tests look up. */
#include <stdio.h>
#include <stdlib.h>

static inline __attribute__((always_inline)) long square(long x)
{
	return x * x ^ (x >> 3); /* L:square */
}

static inline __attribute__((always_inline)) long sum_squares(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += square(i + s); /* L:sum_squares */
	return s;
}

__attribute__((noinline)) long compute(long n)
{
	long r = sum_squares(n); /* L:compute */
	return r + n * 3;
}

__attribute__((noinline)) static long helper(long x)
{
	long y = 0;
	for (long i = 0; i < x; i++)
		y = y * 31 + i; /* L:helper */
	return y;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	printf("%ld %ld\n", compute(n), helper(n));
	return 0;
}

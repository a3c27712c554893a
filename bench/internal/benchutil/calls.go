package benchutil

// CallsFixture is a C program that makes 3n+1 calls: main, then n times mid, which calls leaf
// twice, n its first argument. Built with -O1 -fno-inline so that every call stays a call.
const CallsFixture = `#include <stdio.h>
#include <stdlib.h>
volatile long sink;
long leaf(long x) { return x * 3 + 1; }
long mid(long x) { return leaf(x) + leaf(x + 1); }
int main(int argc, char **argv) {
	long n = atol(argv[1]), s = 0;
	for (long i = 0; i < n; i++)
		s += mid(i);
	sink = s;
	printf("%ld\n", 3 * n + 1);
	return 0;
}
`

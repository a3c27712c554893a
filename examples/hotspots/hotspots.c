/* hotspots: the bundled example profiled by `trueprof demo`.
 *
 * Two threads with known hot functions. Work units are counted, not
 * timed, so shares are stable: in main, checksum ~60% of its CPU and
 * parse ~20%; a worker thread runs transform. Build with frame pointers:
 *   gcc -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
 *       -fno-inline -pthread hotspots.c
 *
 * Calls, given ROUNDS (the argument): main calls process_batch ROUNDS
 * times, each of which calls parse and checksum once; the worker thread
 * calls transform ROUNDS/2 times; checksum and transform call mix 200,000
 * times each. The demo's hooks build (add -finstrument-functions
 * -finstrument-functions-exclude-function-list=mix) counts all but mix's,
 * and internal/demo's test checks those counts.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) static unsigned long mix(unsigned long x) {
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdUL;
	x ^= x >> 33;
	return x;
}

__attribute__((noinline)) unsigned long checksum(unsigned long n, unsigned long seed) {
	unsigned long s = seed;
	for (unsigned long i = 0; i < n; i++)
		s += mix(i ^ s);
	return s;
}

__attribute__((noinline)) unsigned long parse(unsigned long n, unsigned long seed) {
	unsigned long s = seed;
	for (unsigned long i = 0; i < n; i++)
		s = s * 31 + (i & 0xff);
	return s;
}

__attribute__((noinline)) unsigned long transform(unsigned long n, unsigned long seed) {
	unsigned long s = seed;
	for (unsigned long i = 0; i < n; i++)
		s += mix(s + i) >> 3;
	return s;
}

__attribute__((noinline)) void process_batch(unsigned long n, unsigned long seed) {
	sink += parse(n, seed);
	sink += checksum(n, seed);
}

static void *worker(void *arg) {
	unsigned long rounds = (unsigned long)arg;
	for (unsigned long r = 0; r < rounds; r++)
		sink += transform(200000, r);
	return NULL;
}

int main(int argc, char **argv) {
	unsigned long rounds = argc > 1 ? strtoul(argv[1], NULL, 10) : 1500;
	pthread_t t;
	pthread_create(&t, NULL, worker, (void *)(rounds / 2));
	for (unsigned long r = 0; r < rounds; r++)
		process_batch(200000, r);
	pthread_join(t, NULL);
	printf("hotspots: %lu rounds, checksum %lu\n", rounds, sink);
	return 0;
}

/* The calibration target of `trueprof calibrate`: empty functions calling
 * each other, so that every interval between two probe events inside
 * them is (almost) nothing but probe cost. Each transition kind occurs
 * in every call of cal_outer:
 *   cal_outer entry -> cal_leaf entry   entry->entry
 *   cal_leaf entry  -> cal_leaf exit    entry->exit
 *   cal_leaf exit   -> cal_leaf entry   exit->entry (inside cal_outer)
 *   cal_leaf exit   -> cal_outer exit   exit->exit
 * With a work count, cal_leaf spins that many iterations instead, and
 * main prints the loop's own elapsed nanoseconds: the validation run that
 * shows which statistic reproduces the uninstrumented time.
 * Built with -O1 and frame pointers; with -finstrument-functions for the
 * hook mechanism, plainly for uprobes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long work;
static volatile long sink;

/* The local array gives cal_leaf a frame, so that its first instruction
 * is push %rbp as in most frame-pointer code: the instruction a uprobe
 * is cheapest on (the kernel emulates it instead of single-stepping). */
__attribute__((noinline)) void cal_leaf(void) {
	volatile char frame[16];
	frame[0] = 0;
	for (long i = 0; i < work; i++)
		sink += i;
	__asm__ volatile("" ::"r"(frame));
}

__attribute__((noinline)) void cal_outer(void) {
	cal_leaf();
	cal_leaf();
}

int main(int argc, char **argv) {
	long rounds = argc > 1 ? atol(argv[1]) : 100000;
	work = argc > 2 ? atol(argv[2]) : 0;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < rounds; i++)
		cal_outer();
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
	return 0;
}

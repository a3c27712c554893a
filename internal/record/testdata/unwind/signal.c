// The signal fixture of TestUnwindSignal: the program spends most of its
// time inside a SIGPROF handler (in_handler), interrupting spin. With
// "alt" as argument the handler runs on a sigaltstack.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static volatile unsigned long sink;
static volatile long ticks;

/* in_handler works 1.5 ms of each 2 ms tick, by the clock (vDSO, no
 * system call): a count of iterations took most of a tick on one host and
 * a fifth of it on another. */
__attribute__((noinline)) void in_handler(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	long long end = ts.tv_sec * 1000000000LL + ts.tv_nsec + 1500000;
	do {
		for (int i = 0; i < 20000; i++)
			sink = sink * 31 + i;
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while (ts.tv_sec * 1000000000LL + ts.tv_nsec < end);
}

static void handler(int sig) {
	(void)sig;
	in_handler();
	ticks++;
}

__attribute__((noinline)) void spin(void) {
	while (ticks < 150)
		sink++;
}

int main(int argc, char **argv) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	if (argc > 1 && strcmp(argv[1], "alt") == 0) {
		stack_t ss = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16};
		sigaltstack(&ss, NULL);
		sa.sa_flags = SA_ONSTACK;
	}
	sigaction(SIGPROF, &sa, NULL);
	struct itimerval it = {{0, 2000}, {0, 2000}};
	setitimer(ITIMER_PROF, &it, NULL);
	spin();
	printf("%ld ticks\n", ticks);
	return 0;
}

// Page faults and migrations of known counts, per thread: thread
// toucher-i touches 1000*i fresh pages, the main thread 500, and hopper
// moves between CPUs 0 and 1 ten times. toucher-3 is created by
// toucher-2. Then main and the touchers pass a token round on CPU 0 two
// hundred times, switching from one to the next directly, where the
// kernel may swap their perf contexts.
//
//	faults exit|live now|stdin
//
// Once every thread is done, main writes "ready" to standard output.
// exit: the threads then end (and are joined); live: they wait until
// the process is killed, and so does main. stdin: every thread waits for
// a byte on standard input before its work (so that a recorder can
// attach first), and main waits to be killed too; now: they start at
// once.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

static int live;
static pthread_barrier_t start, finished;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turned = PTHREAD_COND_INITIALIZER;
static int turn; // 0: main, 1-3: toucher-i

// passToken pins the caller to CPU 0 and passes the token from me to the
// next of the four two hundred times.
static void passToken(int me) {
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(0, &set);
	sched_setaffinity(0, sizeof set, &set);
	for (int i = 0; i < 200; i++) {
		pthread_mutex_lock(&mu);
		while (turn != me)
			pthread_cond_wait(&turned, &mu);
		turn = (me + 1) % 4;
		pthread_cond_broadcast(&turned);
		pthread_mutex_unlock(&mu);
	}
}
static int hold[2];

static void touch(long pages) {
	char *p = mmap(NULL, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		exit(1);
	for (long i = 0; i < pages; i++)
		p[i * 4096] = 1;
}

static void done(void) {
	char c;
	pthread_barrier_wait(&finished);
	if (live)
		read(hold[0], &c, 1); // never written: until the process dies
}

static void *toucher(void *arg) {
	long i = (long)arg;
	char name[16];
	pthread_t child;
	if (i == 2)
		pthread_create(&child, NULL, toucher, (void *)3);
	snprintf(name, sizeof name, "toucher-%ld", i);
	prctl(PR_SET_NAME, name);
	pthread_barrier_wait(&start);
	touch(1000 * i);
	passToken(i);
	done();
	if (i == 2)
		pthread_join(child, NULL);
	return NULL;
}

static void *hopper(void *arg) {
	prctl(PR_SET_NAME, "hopper");
	pthread_barrier_wait(&start);
	for (int i = 0; i < 10; i++) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(i % 2, &set);
		sched_setaffinity(0, sizeof set, &set);
	}
	done();
	return NULL;
}

int main(int argc, char **argv) {
	live = argc > 1 && strcmp(argv[1], "live") == 0;
	int wait = argc > 2 && strcmp(argv[2], "stdin") == 0;
	pipe(hold);
	pthread_barrier_init(&start, NULL, 5);
	pthread_barrier_init(&finished, NULL, 5);
	pthread_t t[3];
	for (long i = 1; i <= 2; i++)
		pthread_create(&t[i - 1], NULL, toucher, (void *)i);
	pthread_create(&t[2], NULL, hopper, NULL);
	if (wait) {
		char c;
		if (read(0, &c, 1) != 1)
			return 1;
	}
	pthread_barrier_wait(&start);
	touch(500);
	passToken(0);
	pthread_barrier_wait(&finished);
	printf("ready\n");
	fflush(stdout);
	for (int i = 0; i < 3 && !live; i++)
		pthread_join(t[i], NULL);
	if (live || wait) // attached: stay until the recorder is done
		pause();
	return 0;
}

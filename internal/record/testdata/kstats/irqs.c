// Runs for argv[1] ms while interrupts land on its threads: spinner-0
// and spinner-1 keep both CPUs busy, udp sends loopback datagrams (the
// kernel runs the NET_RX softirq on the sending thread) and io writes
// and syncs the file argv[2] (block device interrupts).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double end;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *spinner(void *arg) {
	char name[16];
	snprintf(name, sizeof name, "spinner-%ld", (long)arg);
	prctl(PR_SET_NAME, name);
	volatile unsigned long x = 0;
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			x++;
	return NULL;
}

static void *udp(void *arg) {
	prctl(PR_SET_NAME, "udp");
	int in = socket(AF_INET, SOCK_DGRAM, 0), out = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof a;
	bind(in, (struct sockaddr *)&a, sizeof a);
	getsockname(in, (struct sockaddr *)&a, &n);
	char buf[512] = {0};
	while (now() < end) {
		sendto(out, buf, sizeof buf, 0, (struct sockaddr *)&a, sizeof a);
		recv(in, buf, sizeof buf, 0);
		usleep(200);
	}
	return NULL;
}

static void *io(void *arg) {
	prctl(PR_SET_NAME, "io");
	int fd = open(arg, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	static char buf[64 << 10];
	memset(buf, 1, sizeof buf);
	while (fd >= 0 && now() < end) {
		pwrite(fd, buf, sizeof buf, 0);
		fdatasync(fd);
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	end = now() + atoi(argv[1]) / 1e3;
	pthread_t t[4];
	pthread_create(&t[0], NULL, spinner, (void *)0);
	pthread_create(&t[1], NULL, spinner, (void *)1);
	pthread_create(&t[2], NULL, udp, NULL);
	pthread_create(&t[3], NULL, io, argv[2]);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	return 0;
}

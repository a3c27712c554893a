package record

import (
	"strconv"
	"testing"

	"trueprof/internal/testutil"
)

// tokenRing is four threads passing a token around a ring of pipes,
// each pass a switch-out of the sender's (blocked in read) and a
// switch-in of the receiver's, with a hooked function of a little work
// at each: about 600,000 switch records a second here.
const tokenRing = `
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
enum { threads = 4 };
static int pipes[threads][2], rounds;
static volatile unsigned long sink;
void work(int k) { unsigned long s = 0; for (int i = 0; i < k; i++) s += i * 2654435761u; sink += s; }
static void *pass(void *arg) {
	long me = (long)arg;
	char c;
	for (int i = 0; i < rounds; i++) {
		if (read(pipes[me][0], &c, 1) != 1)
			break;
		work(200);
		if (write(pipes[(me + 1) % threads][1], &c, 1) != 1)
			break;
	}
	return 0;
}
int main(int argc, char **argv) {
	rounds = atoi(argv[1]);
	pthread_t t[threads];
	for (long i = 0; i < threads; i++)
		if (pipe(pipes[i]))
			return 1;
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], 0, pass, (void *)i);
	write(pipes[0][1], "x", 1);
	for (long i = 0; i < threads; i++)
		pthread_join(t[i], 0);
	return 0;
}
`

// TestProbeRingsHoldSwitches records a hooked program whose threads
// switch as fast as pipes let them, without samples, so that its rings
// carry nothing but side records: no record is lost (the kernel's own
// count included), and every pass's switch-out is there. It runs 40,000
// rounds, half a second: longer runs are not yet lossless on a loaded
// machine (docs/recording.md, "Limits and losses"). 120,000 rounds lost
// 58,977 records once beside the package's other tests (none alone in
// 3 of 3, before the chunked queue and the run merge and after); 200,000
// rounds lost 190,000-850,000 records in 2 of 3 recordings before,
// 14,000-136,000 in 4 of 12 after; 250,000 rounds 330,000-930,000 in 5
// of 5 before, 30,000-231,000 in 2 of 9 after. With the 4 MiB rings of
// sideOnlyBytes 40,000 rounds lost nothing in 30 of 30 runs with the
// collector on and 30 of 30 with GOGC=off; 120,000 rounds lost 2,383
// and 10,884 records in 2 of 8.
func TestProbeRingsHoldSwitches(t *testing.T) {
	testutil.RequirePerf(t)
	const rounds = 40_000 // 160,000 passes
	bin := testutil.BuildC(t, t.TempDir(), "tokenring", tokenRing, "-O1", "-pthread", "-finstrument-functions")
	res, p := recordCmd(t, Config{Command: []string{bin, strconv.Itoa(rounds)}, Mech: MechHook, NoSampling: true})
	var out int
	var first, last uint64
	for _, s := range p.Switches {
		if s.Out {
			out++
		}
		if first == 0 {
			first = s.Time
		}
		last = s.Time
	}
	rate := float64(len(p.Switches)) / (float64(last-first) / 1e9)
	t.Logf("%d switch records (%d out) at %.0f a second, %d lost, %d events", len(p.Switches), out, rate, res.Lost, res.Events)
	if res.Lost != 0 || p.Lost.Total() != 0 {
		t.Errorf("%d records lost (trace: %+v)", res.Lost, p.Lost)
	}
	// Each pass leaves its sender blocked in read.
	if out < 4*rounds {
		t.Errorf("%d switch-outs for %d passes of the token: want at least as many", out, 4*rounds)
	}
}

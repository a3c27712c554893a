package testutil

import (
	"fmt"
	"strings"
)

// ManyFunctionsC returns C source with n functions f0 … f(n-1) that main
// calls once each after reading a byte from stdin (so that probes can be
// placed first), then prints their sum.
func ManyFunctionsC(n int) string {
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include <unistd.h>\n")
	for i := range n {
		fmt.Fprintf(&b, "int f%d(int x) { return x + %d; }\n", i, i)
	}
	b.WriteString("int main(void) {\n\tchar c;\n\tif (read(0, &c, 1) < 0) return 1;\n\tlong s = 0;\n")
	for i := range n {
		fmt.Fprintf(&b, "\ts += f%d(%d);\n", i, i)
	}
	b.WriteString("\tprintf(\"%ld\\n\", s);\n\treturn 0;\n}\n")
	return b.String()
}

// CallsC is the dense call load of bench/hooks, bench/percall and the hook
// tests: main calls mid n times (n = argv[1]) and mid calls leaf twice, so
// 3n+1 calls and 6n+2 events when built with -finstrument-functions
// (-O1 -fno-inline keeps every call a call). It prints 3n+1.
const CallsC = `#include <stdio.h>
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

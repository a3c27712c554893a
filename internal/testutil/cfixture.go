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

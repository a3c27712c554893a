//go:build !amd64

package hook

// haveRDTSC reports whether rdtsc is implemented for this architecture:
// elsewhere the hook library times records with clock_gettime.
const haveRDTSC = false

func rdtsc() uint64 { return 0 }

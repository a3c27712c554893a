package hook

// haveRDTSC reports whether rdtsc is implemented for this architecture.
const haveRDTSC = true

// rdtsc returns the time stamp counter.
func rdtsc() uint64

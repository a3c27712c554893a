//go:build !amd64

package uprobe

import "trueprof/internal/trace"

// Cost measures the per-hit cost of entry probes; it is implemented on
// x86-64 only and returns ErrNotSupported elsewhere.
func Cost() (emulated, stepped float64, err error) {
	return 0, 0, ErrNotSupported
}

// SiteCosts measures the cost of each class of probe site; it is
// implemented on x86-64 only and returns ErrNotSupported elsewhere.
func SiteCosts() (trace.SiteCosts, error) {
	return trace.SiteCosts{}, ErrNotSupported
}

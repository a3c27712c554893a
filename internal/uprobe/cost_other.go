//go:build !amd64

package uprobe

import "trueprof/internal/trace"

// SiteCosts measures the cost of each class of probe site; it is
// implemented on x86-64 only and returns ErrNotSupported elsewhere.
func SiteCosts() (trace.SiteCosts, error) {
	return trace.SiteCosts{}, ErrNotSupported
}

//go:build !amd64

package record

// holderCode is nil: no tiny holder for this machine (tiny.go).
var holderCode []byte

//go:build !amd64

package record

// holderCode and wrapperCode are nil: no tiny holder or exec wrapper
// for this machine (tiny.go).
var holderCode, wrapperCode []byte

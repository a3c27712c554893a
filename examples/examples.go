// Package examples bundles the example programs that `trueprof demo` and
// the end-to-end tests profile. They are C sources compiled on the spot
// with gcc, which every supported machine has.
package examples

import _ "embed"

// Hotspots is the source of examples/hotspots/hotspots.c: two threads
// with known hot functions (checksum, parse, transform, mix).
//
//go:embed hotspots/hotspots.c
var Hotspots string

// Package instr is the former home of the analysis of instrumented
// recordings, now package calltree; its names stay here as aliases until
// every importer uses calltree.
//
// Deprecated: use package calltree.
package instr

// Package report renders the views of a recorded profile: tprof (process
// → thread → module → symbol ticks), flat (self and total per function),
// tree (each thread's call-stack tree) and arcflow (caller/callee stanzas),
// as text or JSON.
//
// Every report starts with a header that says what is missing from the
// data (lost records, throttling, truncated call chains, a damaged trace)
// so that no one reads a partial profile as a complete one.
//
// Usage:
//
//	err := report.Write(os.Stdout, prof, report.Options{
//		View:   "flat",
//		Format: "text",
//		Filter: report.Filter{PID: 1234, HasPID: true},
//		Min:    0.5, // hide functions below 0.5% self
//	})
//
// docs/reports.md describes each view's columns and the JSON schema.
package report

package perf

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Event names a countable or sampleable perf event.
type Event struct {
	Name   string
	Type   uint32 // PERF_TYPE_*
	Config uint64 // PERF_COUNT_*
}

// events are the named events, with perf(1)'s names and aliases.
var events = map[string]Event{
	"cpu-clock":        {"cpu-clock", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_CLOCK},
	"task-clock":       {"task-clock", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_TASK_CLOCK},
	"page-faults":      {"page-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS},
	"faults":           {"page-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS},
	"minor-faults":     {"minor-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS_MIN},
	"major-faults":     {"major-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ},
	"context-switches": {"context-switches", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
	"cs":               {"context-switches", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
	"cpu-migrations":   {"cpu-migrations", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_MIGRATIONS},
	"migrations":       {"cpu-migrations", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_MIGRATIONS},
	"alignment-faults": {"alignment-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_ALIGNMENT_FAULTS},
	"emulation-faults": {"emulation-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_EMULATION_FAULTS},
	// dummy counts nothing: it carries side records (mmaps, threads,
	// context switches) when only probes, not samples, are wanted.
	"dummy": {"dummy", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_DUMMY},

	"cycles":                  {"cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES},
	"cpu-cycles":              {"cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES},
	"instructions":            {"instructions", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS},
	"cache-references":        {"cache-references", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_REFERENCES},
	"cache-misses":            {"cache-misses", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_MISSES},
	"branches":                {"branches", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
	"branch-instructions":     {"branches", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
	"branch-misses":           {"branch-misses", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BRANCH_MISSES},
	"bus-cycles":              {"bus-cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_BUS_CYCLES},
	"ref-cycles":              {"ref-cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_REF_CPU_CYCLES},
	"stalled-cycles-frontend": {"stalled-cycles-frontend", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
	"stalled-cycles-backend":  {"stalled-cycles-backend", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
}

// ParseEvent returns the event with perf(1)'s name or alias, e.g.
// "cpu-clock", "page-faults" or "cycles".
func ParseEvent(name string) (Event, error) {
	if e, ok := events[strings.ToLower(name)]; ok {
		return e, nil
	}
	return Event{}, fmt.Errorf("unknown event %q; known events: %s", name, strings.Join(EventNames(), ", "))
}

// EventNames lists the canonical event names, sorted.
func EventNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, e := range events {
		if !seen[e.Name] {
			seen[e.Name] = true
			names = append(names, e.Name)
		}
	}
	sort.Strings(names)
	return names
}

// Clock reports whether e counts nanoseconds (cpu-clock, task-clock), so
// that a sampling period of e is a time.
func (e Event) Clock() bool {
	return e.Type == unix.PERF_TYPE_SOFTWARE &&
		(e.Config == unix.PERF_COUNT_SW_CPU_CLOCK || e.Config == unix.PERF_COUNT_SW_TASK_CLOCK)
}

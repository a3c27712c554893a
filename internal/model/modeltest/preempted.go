package modeltest

import (
	"fmt"
	"strings"
)

// Preempted is a hook recording of thread 1 (pid 1, "app") calibrated at
// 1 ns a transition: main calls f clean+preempted times; a clean call
// takes 10 ns on CPU, a preempted one 14 (4 ns more, the switch's cost)
// beside the 100 ns it is switched out.
func Preempted(clean, preempted int) *Builder {
	var b strings.Builder
	b.WriteString("0 +main")
	now := 10
	for i := range clean + preempted {
		if i < clean {
			fmt.Fprintf(&b, " %d +f %d -f", now, now+10)
			now += 20
			continue
		}
		fmt.Fprintf(&b, " %d +f %d preempt %d in %d -f", now, now+5, now+105, now+114)
		now += 124
	}
	fmt.Fprintf(&b, " %d -main", now)
	return NewHooks().Thread(1, 1, "app").Calibrate(1, 1, 1, 1).Run(1, 1, b.String())
}

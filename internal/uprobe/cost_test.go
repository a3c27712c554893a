package uprobe

import "testing"

func TestCost(t *testing.T) {
	requireUprobes(t)
	emulated, stepped, err := Cost()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("entry probe per hit: %.0f ns on push %%rbp (emulated), %.0f ns on mov %%edi,%%edx (single-stepped)", emulated, stepped)
	if emulated <= 0 || emulated > 50000 || stepped <= emulated {
		t.Errorf("implausible costs: emulated %.0f ns, stepped %.0f ns", emulated, stepped)
	}
	// The exits: a RET probe (Go) is single-stepped; a uretprobe adds the
	// return trampoline to an emulated entry.
	ret, err := hitCost(costMovPC, 2, false, 1000)
	if err != nil {
		t.Fatal(err)
	}
	both, err := hitCost(costPushPC, 0, true, 20000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit probe per hit: %.0f ns on ret, %.0f ns for a uretprobe", ret, both-emulated)
}

// TestSiteCosts: every class costs something, and a single-stepped site
// more than its emulated or trampoline counterpart.
func TestSiteCosts(t *testing.T) {
	requireUprobes(t)
	c, err := SiteCosts()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("per hit: entry %.0f ns emulated, %.0f ns stepped; exit %.0f ns return probe, %.0f ns RET probe",
		c.EntryEmulated, c.EntryStepped, c.ExitReturn, c.ExitRetInsn)
	if c.EntryEmulated <= 0 || c.ExitReturn <= 0 || c.EntryStepped <= c.EntryEmulated || c.ExitRetInsn <= c.ExitReturn {
		t.Errorf("implausible site costs %+v", c)
	}
}

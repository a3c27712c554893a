package uprobe

import "testing"

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

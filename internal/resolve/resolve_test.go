package resolve

import "testing"

func TestAddrSpaceInsert(t *testing.T) {
	var as addrSpace
	as.insert(Mapping{Start: 0x1000, End: 0x5000, PgOff: 0, Path: "a"})
	as.insert(Mapping{Start: 0x2000, End: 0x3000, PgOff: 0x100000, Path: "b"})
	tests := []struct {
		addr  uint64
		path  string
		pgoff uint64
	}{
		{0x1800, "a", 0}, {0x2800, "b", 0x100000}, {0x3800, "a", 0x2000}, {0x5000, "", 0}, {0x800, "", 0},
	}
	for _, tt := range tests {
		m := as.find(tt.addr)
		switch {
		case m == nil && tt.path == "":
		case m == nil || m.Path != tt.path || m.PgOff != tt.pgoff:
			t.Errorf("find(%#x) = %+v, want %s pgoff %#x", tt.addr, m, tt.path, tt.pgoff)
		}
	}
	if len(as.maps) != 3 {
		t.Errorf("%d mappings after a split, want 3", len(as.maps))
	}
}

func TestParseMapsLine(t *testing.T) {
	m, ok := ParseMapsLine("7f1c2a000000-7f1c2a1a0000 r-xp 00028000 fe:01 1234  /usr/lib/x86_64-linux-gnu/libc.so.6")
	if !ok || m.Start != 0x7f1c2a000000 || m.End != 0x7f1c2a1a0000 || m.PgOff != 0x28000 || m.Path != "/usr/lib/x86_64-linux-gnu/libc.so.6" {
		t.Errorf("got %+v %v", m, ok)
	}
	if _, ok := ParseMapsLine("7f1c2a000000-7f1c2a1a0000 rw-p 00028000 fe:01 1234 /x"); ok {
		t.Error("non-executable mapping accepted")
	}
}

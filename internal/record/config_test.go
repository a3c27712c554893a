package record

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// TestValidate checks every error of Config.Validate, each by the part of
// its message that names the setting, and the defaults it fills in.
func TestValidate(t *testing.T) {
	ok := func() Config { return Config{Output: "t.trace", Command: []string{"prog"}} }
	with := func(f func(*Config)) Config { c := ok(); f(&c); return c }
	for _, tt := range []struct {
		name string
		cfg  Config
		err  string // "" for a valid configuration
	}{
		{"command", ok(), ""},
		{"attach", Config{Output: "t.trace", PID: 1, Duration: time.Second, Trace: []string{"f"}}, ""},
		{"no output", with(func(c *Config) { c.Output = "" }), "no trace file"},
		{"command and pid", with(func(c *Config) { c.PID = 1 }), "not both"},
		{"neither", Config{Output: "t.trace"}, "give a command to launch or a pid"},
		{"negative pid", Config{Output: "t.trace", PID: -3}, "pid -3"},
		{"negative duration", with(func(c *Config) { c.Duration = -time.Second }), "duration -1s"},
		{"wrap", with(func(c *Config) { c.Mode = trace.ModeWrap; c.SizeLimit = 1 << 20 }), ""},
		{"unknown mode", with(func(c *Config) { c.Mode = "ring" }), `mode "ring": want normal, wrap or continuous`},
		{"negative size", with(func(c *Config) { c.SizeLimit = -1 }), "size limit -1"},
		{"unknown mech", with(func(c *Config) { c.Mech = "ptrace" }), `mechanism "ptrace": want hook or uprobe`},
		{"hook attached", Config{Output: "t.trace", PID: 1, Mech: MechHook}, "hook needs a launched command"},
		{"uprobes of nothing", with(func(c *Config) { c.Mech = MechUprobe }), "uprobes need patterns"},
		{"uprobes of a root", with(func(c *Config) { c.Mech = MechUprobe; c.Root = "main" }), ""},
		{"unknown call graph", with(func(c *Config) { c.CallGraph = "lbr" }), `call graph "lbr": want fp, dwarf or auto`},
		{"fp sized", with(func(c *Config) { c.CallGraph = CallGraphFP; c.StackBytes = 512 }), "fp copies no stack"},
		{"dwarf sized", with(func(c *Config) { c.CallGraph = CallGraphDWARF; c.StackBytes = 16384 }), ""},
		{"stack too large", with(func(c *Config) { c.StackBytes = perf.MaxUserStack + 8 }), "stack copy of 65536 bytes"},
		{"stack unaligned", with(func(c *Config) { c.StackBytes = 100 }), "stack copy of 100 bytes"},
		{"negative stack", with(func(c *Config) { c.StackBytes = -8 }), "stack copy of -8 bytes"},
		{"ring pages", with(func(c *Config) { c.RingPages = 256 }), ""},
		{"ring pages not a power of two", with(func(c *Config) { c.RingPages = 100 }), "100 ring pages"},
		{"negative ring pages", with(func(c *Config) { c.RingPages = -4 }), "-4 ring pages"},
		{"too many ring pages", with(func(c *Config) { c.RingPages = maxRingPages * 2 }), "ring pages: want a power of two up to"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("Validate() = %v, want an error saying %q", err, tt.err)
			case err != nil && !errors.Is(err, ErrConfig):
				t.Errorf("Validate() = %v, want it to wrap ErrConfig", err)
			}
		})
	}
}

// TestValidateDefaults checks what Validate fills in.
func TestValidateDefaults(t *testing.T) {
	c := Config{Output: "t.trace", Command: []string{"prog"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Freq != 999 || c.Mode != trace.ModeNormal || c.CallGraph != CallGraphAuto {
		t.Errorf("defaults: freq %d, mode %q, call graph %q; want 999, normal, auto", c.Freq, c.Mode, c.CallGraph)
	}
	c = Config{Output: "t.trace", Command: []string{"prog"}, Period: 1000, Mode: trace.ModeContinuous, SizeLimit: 1 << 20}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Freq != 0 || c.SizeLimit != 0 {
		t.Errorf("period and continuous: freq %d, size limit %d; want 0 and 0 (no limit)", c.Freq, c.SizeLimit)
	}
}

// TestParseCallGraph checks the modes and stack sizes of perf's
// --call-graph syntax, and that Validate rejects what is out of range.
func TestParseCallGraph(t *testing.T) {
	for _, tt := range []struct {
		in   string
		mode CallGraph
		size int
		ok   bool
	}{
		{"auto", CallGraphAuto, 0, true}, {"dwarf", CallGraphDWARF, 0, true}, {"fp", CallGraphFP, 0, true},
		{"dwarf,16384", CallGraphDWARF, 16384, true}, {"auto,65528", CallGraphAuto, 65528, true},
		{"dwarf,65536", "", 0, false}, {"dwarf,100", "", 0, false}, {"dwarf,0", "", 0, false},
		{"dwarf,", "", 0, false}, {"fp,512", "", 0, false}, {"lbr", "", 0, false},
	} {
		mode, size, err := ParseCallGraph(tt.in)
		if err == nil {
			c := Config{Output: "t.trace", Command: []string{"prog"}, CallGraph: mode, StackBytes: size}
			err = c.Validate()
		}
		if (err == nil) != tt.ok || (tt.ok && (mode != tt.mode || size != tt.size)) {
			t.Errorf("ParseCallGraph(%q) = %q, %d, %v", tt.in, mode, size, err)
		}
	}
}

// TestChooseMech checks the one place the mechanism is chosen: hooks for
// a -finstrument-functions build unless uprobes are asked for, uprobes
// for named functions and attached processes, nothing otherwise.
func TestChooseMech(t *testing.T) {
	dir := t.TempDir()
	const src = "int main(void) { return 0; }\n"
	plain := testutil.BuildC(t, dir, "plain", src)
	hooked := testutil.BuildC(t, dir, "hooked", src, "-finstrument-functions")
	// A static executable with the hooks: glibc's no-op hooks are linked
	// in, and no preloaded library can take their place.
	static := testutil.BuildC(t, dir, "static", src, "-finstrument-functions", "-static")
	script := filepath.Join(dir, "s.sh")
	envScript := filepath.Join(dir, "s.env")
	data := filepath.Join(dir, "data")
	for path, text := range map[string]string{script: "#!/bin/sh -e\necho hi\n", envScript: "#!/usr/bin/env sh\necho hi\n", data: "not a program\n"} {
		if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sh, err := exec.LookPath("sh") // as env finds it
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cfg  Config
		want Mech
		err  string // what the error says, "" for none
		log  string // what the log says, "" for nothing
	}{
		{"plain", Config{Command: []string{plain}}, MechAuto, "", ""},
		{"plain traced", Config{Command: []string{plain}, Trace: []string{"main"}}, MechUprobe, "", ""},
		{"plain rooted", Config{Command: []string{plain}, Root: "main"}, MechUprobe, "", ""},
		{"hooked", Config{Command: []string{hooked}}, MechHook, "", ""},
		{"hooked traced", Config{Command: []string{hooked}, Trace: []string{"main"}}, MechHook, "", ""},
		{"hooked, uprobes asked", Config{Command: []string{hooked}, Mech: MechUprobe, Trace: []string{"main"}}, MechUprobe, "", ""},
		{"plain, hooks asked", Config{Command: []string{plain}, Mech: MechHook}, MechAuto, "not built with -finstrument-functions", ""},
		{"static hooks", Config{Command: []string{static}}, MechAuto, "", static + " is statically linked with -finstrument-functions hooks: hooks cannot be interposed by preloading; record it with uprobes (--trace FUNC), or link it dynamically; recording samples only\n"},
		{"static hooks traced", Config{Command: []string{static}, Trace: []string{"main"}}, MechUprobe, "", ""},
		{"static, hooks asked", Config{Command: []string{static}, Mech: MechHook}, MechAuto, "statically linked", ""},
		{"script sampled", Config{Command: []string{script}}, MechAuto, "", ""},
		{"script traced", Config{Command: []string{script}, Trace: []string{"main"}}, MechAuto, script + ": not an ELF executable: a script run by /bin/sh -e; --trace, --root and hooks probe the functions of ELF programs, so trace the interpreter's own functions (trueprof record --trace 'FUNC' -- /bin/sh -e " + script + "), or record the script without --trace to sample it", ""},
		{"env script rooted", Config{Command: []string{envScript}, Root: "main"}, MechAuto, "a script run by " + sh + ";", ""},
		{"script, uprobes asked", Config{Command: []string{script}, Mech: MechUprobe}, MechAuto, "a script run by /bin/sh", ""},
		{"script, hooks asked", Config{Command: []string{script}, Mech: MechHook}, MechAuto, "a script run by /bin/sh", ""},
		{"data traced", Config{Command: []string{data}, Trace: []string{"main"}}, MechAuto, data + ": not an ELF executable: --trace, --root and hooks probe ELF programs", ""},
		{"attached", Config{PID: 1}, MechAuto, "", ""},
		{"attached traced", Config{PID: 1, Trace: []string{"main"}}, MechUprobe, "", ""},
	} {
		var log bytes.Buffer
		got, err := chooseMech(tt.cfg, &log)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: chooseMech = %v", tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: chooseMech = %q, %v; want an error saying %q", tt.name, got, err, tt.err)
		case err == nil && got != tt.want:
			t.Errorf("%s: chooseMech = %q, want %q", tt.name, got, tt.want)
		}
		if tt.log == "" && log.Len() > 0 || !strings.Contains(log.String(), tt.log) {
			t.Errorf("%s: log %q, want %q", tt.name, log.String(), tt.log)
		}
	}
}

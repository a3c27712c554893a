package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Commands a Request may carry.
const (
	CmdStatus   = "status"   // the session's counts (Status)
	CmdPause    = "pause"    // stop writing samples and events
	CmdResume   = "resume"   // write them again
	CmdSnapshot = "snapshot" // a complete trace so far, into the descriptor sent along
	CmdStop     = "stop"     // end the recording, as SIGINT to the recorder does
	CmdReset    = "reset"    // an aggregated recording's trees start over (record --aggregate)
)

// Commands that change what is probed while the target runs; their
// Request carries a Pattern (see probeRequest).
const (
	CmdTraceAdd    = "trace-add"    // probe the functions matching Pattern
	CmdTraceRemove = "trace-remove" // remove the probes of the functions matching Pattern
	CmdRoot        = "root"         // make Pattern, one function, the --root function
)

// MaxMessage bounds a request or an answer, newline included: a packet
// longer than this is refused, never buffered.
const MaxMessage = 4096

// ErrBadRequest wraps every reason a request is refused.
var ErrBadRequest = errors.New("bad request")

// Request is one command to a session. A snapshot request comes with the
// descriptor of the file to write, sent with it (SCM_RIGHTS): the client
// opens the file with its own rights, and no path crosses the socket.
type Request struct {
	Cmd string `json:"cmd"`
	// Pattern is the functions a probe command names, in --trace's
	// syntax ([MODULE:]GLOB); empty, and refused, for other commands.
	Pattern string `json:"pattern,omitempty"`
}

// Answer is a session's reply to one request. Error is set, and nothing
// else, when the request failed; a refused request changes nothing.
type Answer struct {
	Error string `json:"error,omitempty"`
	// Status is the session's state, in the answer to every command
	// but a refused one.
	Status *Status `json:"status,omitempty"`
	// Bytes is the size of the snapshot written.
	Bytes int64 `json:"bytes,omitempty"`
	// Probes says what a probe command placed or removed.
	Probes *ProbeChange `json:"probes,omitempty"`
}

// ProbeChange is what a trace-add, trace-remove or root request changed.
type ProbeChange struct {
	// Count is the number of functions placed or removed, Sites their
	// probe sites (a function probed at its entry and its RETs has
	// several).
	Count int `json:"count"`
	Sites int `json:"sites"`
	// Removed is, for root, the functions of the previous root's
	// subgraph whose probes came off.
	Removed int `json:"removed,omitempty"`
	// Functions names them, sorted, at most MaxListed: an answer is one
	// packet.
	Functions []string `json:"functions,omitempty"`
}

// MaxListed bounds the functions a ProbeChange names.
const MaxListed = 20

// Status is what a session reports of itself.
type Status struct {
	Target   []string `json:"target,omitempty"` // the launched command
	PID      int      `json:"pid"`              // the target's process
	Attached bool     `json:"attached"`         // attached to a running process (-p)
	Output   string   `json:"output"`           // the trace file
	// Mech is the probe mechanism of an instrumented recording ("hook",
	// "uprobe"), empty when only sampling.
	Mech    string `json:"mech,omitempty"`
	Events  uint64 `json:"events"`  // entries and exits written
	Samples uint64 `json:"samples"` // samples written
	Lost    uint64 `json:"lost"`    // samples and events lost (kernel, size limit)
	// Dropped counts the samples and events thrown away while paused.
	Dropped uint64 `json:"dropped"`
	Bytes   int64  `json:"bytes"`  // trace bytes written so far
	Probes  int    `json:"probes"` // functions probed
	Paused  bool   `json:"paused"`
	// Pauses is the number of pause intervals, the open one included,
	// and PausedNS their total length.
	Pauses    int           `json:"pauses"`
	PausedNS  time.Duration `json:"paused_ns"`
	ElapsedNS time.Duration `json:"elapsed_ns"` // since recording began
	// Aggregated says the recording folds its events into call trees
	// (record --aggregate); TreeNodes is then their number of nodes and
	// Resets how many times they started over (reset).
	Aggregated bool   `json:"aggregated,omitempty"`
	TreeNodes  uint64 `json:"tree_nodes,omitempty"`
	Resets     int    `json:"resets,omitempty"`
}

// DecodeRequest reads one request packet: a JSON object with a known
// command and no other field, optionally ended by a newline. Anything
// else is an error wrapping ErrBadRequest.
func DecodeRequest(b []byte) (Request, error) {
	var r Request
	if len(b) > MaxMessage {
		return r, fmt.Errorf("%w: %d bytes, at most %d", ErrBadRequest, len(b), MaxMessage)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return Request{}, fmt.Errorf("%w: more than one JSON value", ErrBadRequest)
	}
	switch r.Cmd {
	case CmdStatus, CmdPause, CmdResume, CmdSnapshot, CmdStop, CmdReset:
		if r.Pattern != "" {
			return Request{}, fmt.Errorf("%w: %s takes no pattern", ErrBadRequest, r.Cmd)
		}
		return r, nil
	case CmdTraceAdd, CmdTraceRemove, CmdRoot:
		if err := probeRequest(r); err != nil {
			return Request{}, err
		}
		return r, nil
	}
	return Request{}, fmt.Errorf("%w: unknown command %q", ErrBadRequest, r.Cmd)
}

// maxPattern bounds a probe command's pattern.
const maxPattern = 1024

// probeRequest checks the pattern of a probe command: present, of
// printable characters, one function for root. Whether it is a valid
// glob and what it matches is the recorder's to say.
func probeRequest(r Request) error {
	switch {
	case r.Pattern == "":
		return fmt.Errorf("%w: %s needs a pattern", ErrBadRequest, r.Cmd)
	case len(r.Pattern) > maxPattern:
		return fmt.Errorf("%w: pattern of %d bytes, at most %d", ErrBadRequest, len(r.Pattern), maxPattern)
	case strings.ContainsFunc(r.Pattern, func(c rune) bool { return !unicode.IsPrint(c) || c == utf8.RuneError }):
		return fmt.Errorf("%w: pattern %q has unprintable characters", ErrBadRequest, r.Pattern)
	case r.Cmd == CmdRoot && strings.ContainsAny(r.Pattern, "*?["):
		return fmt.Errorf("%w: root names one function, not a pattern: %q", ErrBadRequest, r.Pattern)
	}
	return nil
}

// encode renders v as one packet, newline-terminated.
func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b)+1 > MaxMessage {
		return nil, fmt.Errorf("control: message of %d bytes exceeds %d", len(b)+1, MaxMessage)
	}
	return append(b, '\n'), nil
}

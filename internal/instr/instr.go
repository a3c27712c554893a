package instr

import (
	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// Aliases of the calltree names this package used to define.
type (
	Options   = calltree.Options
	Metrics   = calltree.Metrics
	Node      = calltree.Node
	Repairs   = calltree.Repairs
	Thread    = calltree.Thread
	Process   = calltree.Process
	Arc       = calltree.Arc
	Function  = calltree.Function
	Result    = calltree.Result
	Func      = calltree.Func
	FlowKind  = calltree.FlowKind
	FlowEvent = calltree.FlowEvent
	// FlowThread is calltree.FlowThread.
	FlowThread = calltree.FlowThread
)

// Callflow line kinds, as calltree's.
const (
	FlowEntry     = calltree.FlowEntry
	FlowExit      = calltree.FlowExit
	FlowPopped    = calltree.FlowPopped
	FlowUnmatched = calltree.FlowUnmatched
	FlowUnclosed  = calltree.FlowUnclosed
	FlowDetach    = calltree.FlowDetach
	FlowDetached  = calltree.FlowDetached
	FlowEnd       = calltree.FlowEnd
)

// Errors of Build and Callflow, as calltree's.
var (
	ErrRootNotFound   = calltree.ErrRootNotFound
	ErrBadCalibration = calltree.ErrBadCalibration
	ErrNoGoroutines   = calltree.ErrNoGoroutines
)

// Build is calltree.Build.
func Build(p *model.Profile, o Options) (*Result, error) { return calltree.Build(p, o) }

// Callflow is calltree.Callflow.
func Callflow(p *model.Profile, o Options) ([]FlowThread, error) { return calltree.Callflow(p, o) }

// Transition is calltree.Transition.
func Transition(prevEntry, entry bool) int { return calltree.Transition(prevEntry, entry) }

// TransitionName is calltree.TransitionName.
func TransitionName(kind int) string { return calltree.TransitionName(kind) }

package calltree

import "trueprof/internal/model"

// Func identifies a function: the same name in two modules is two
// functions (two copies of a static helper, or a library and the program
// both defining it).
type Func struct {
	Name   string `json:"name"`
	Module string `json:"module"`
}

// Unknown is the function of a sample without a call stack, of a
// location missing from the trace, and of an event at such a location.
var Unknown = Func{Name: "[unknown]"}

// Root is the pseudo function that calls each thread's outermost
// functions in the caller lists.
var Root = Func{Name: "<root>"}

// FuncID numbers the functions of a Table: the analysis compares and
// indexes functions by id, never by their strings. UnknownID is Unknown.
type FuncID int32

// UnknownID is the id of Unknown in every Table.
const UnknownID FuncID = 0

// Table is the one expansion of a profile's locations into functions:
// every location id maps to the ids of its frames once, when the table
// is made, so that walking a sample's stack or replaying an event costs
// index lookups rather than string hashing.
type Table struct {
	p        *model.Profile
	funcs    []Func     // by FuncID
	locFuncs [][]FuncID // by location id: outermost (physical) first
}

// NewTable expands the locations of p. Location 0 and the frameless
// locations the model never produces still get a function (Frames).
func NewTable(p *model.Profile) *Table {
	t := &Table{p: p, funcs: []Func{Unknown}, locFuncs: make([][]FuncID, len(p.Locations))}
	ids := map[Func]FuncID{Unknown: UnknownID}
	intern := func(f Func) FuncID {
		id, ok := ids[f]
		if !ok {
			id = FuncID(len(t.funcs))
			ids[f] = id
			t.funcs = append(t.funcs, f)
		}
		return id
	}
	for id := range p.Locations {
		frames, module := Frames(p, uint32(id))
		fs := make([]FuncID, len(frames))
		// Frames are innermost first: the physical function is the last.
		for k := range frames {
			fs[len(frames)-1-k] = intern(Func{Name: frames[k].Function, Module: module})
		}
		t.locFuncs[id] = fs
	}
	return t
}

// Profile returns the profile t expands.
func (t *Table) Profile() *model.Profile { return t.p }

// Len is the number of functions; ids run from 0 to Len()-1.
func (t *Table) Len() int { return len(t.funcs) }

// Func returns the function of id; Unknown for an id t does not have.
func (t *Table) Func(id FuncID) Func {
	if id < 0 || int(id) >= len(t.funcs) {
		return Unknown
	}
	return t.funcs[id]
}

// unknownFuncs is the expansion of a location id the trace lacks.
var unknownFuncs = []FuncID{UnknownID}

// LocFuncs returns the functions of location id's frames, outermost (the
// physical function) first and the functions inlined into it after;
// [UnknownID] for an id the profile lacks. Do not modify it.
func (t *Table) LocFuncs(id uint32) []FuncID {
	if id == 0 || int(id) >= len(t.locFuncs) {
		return unknownFuncs
	}
	return t.locFuncs[id]
}

// LocFunc returns the physical function of location id: the one whose
// code holds its address, whatever was inlined into it there.
func (t *Table) LocFunc(id uint32) FuncID { return t.LocFuncs(id)[0] }

// Stack appends to buf the function-level call stack of sample stack id,
// outermost first, inlined functions after the function they were
// inlined into, and returns it with the physical function of the leaf
// location. A sample without a stack has the stack [UnknownID].
func (t *Table) Stack(id uint32, buf []FuncID) (funcs []FuncID, leaf FuncID) {
	start := len(buf)
	leaf = UnknownID
	var locs [64]uint32
	loc := t.p.Stack(id, locs[:0])
	for i := len(loc) - 1; i >= 0; i-- {
		buf = append(buf, t.LocFuncs(loc[i])...)
	}
	if len(loc) > 0 {
		leaf = t.LocFunc(loc[0])
	}
	if len(buf) == start {
		buf = append(buf, UnknownID)
	}
	return buf, leaf
}

// Frames returns the frames (innermost first) and module of location id
// of p. The list is never empty: a bad id becomes an Unknown frame, and a
// location without frames (which the model promises never to produce) a
// "module+0xoffset" frame, rather than a lost sample.
func Frames(p *model.Profile, id uint32) ([]model.Frame, string) {
	if int(id) >= len(p.Locations) || id == 0 {
		return []model.Frame{{Function: Unknown.Name}}, ""
	}
	l := &p.Locations[id]
	if len(l.Frames) == 0 {
		return []model.Frame{{Function: model.AddressName(l.Module, l.Offset)}}, l.Module
	}
	return l.Frames, l.Module
}

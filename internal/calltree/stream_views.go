package calltree

import "trueprof/internal/model"

// BuildStreamEach is BuildStreamSamples that also hands every record of
// the file to each (in the file's order, before the replay sees the
// records of its time), so that a view needing per-record counts beside
// the trees (the web page's timeline and source lines) takes them from
// the same pass over the file instead of holding the records. each must
// not keep the record: it is reused. A nil each is BuildStreamSamples.
func BuildStreamEach(s *model.Stream, o Options, each func(*model.Record)) (*Result, *Samples, error) {
	if each == nil {
		return BuildStreamSamples(s, o)
	}
	if len(o.Filter.LabelMatcher()) > 0 {
		return nil, nil, ErrNeedsLoad
	}
	rs, err := s.Records()
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	next := func(r *model.Record) error {
		err := rs.Next(r)
		if err == nil {
			each(r)
		}
		return err
	}
	g := newGrouper(s.Profile, o.Filter, o.ByGoroutine)
	a, err := replayRecords(s.Profile, summary{counts: s.Counts, first: s.First, last: s.Last}, next, o, g)
	if err != nil {
		return nil, nil, err
	}
	return a.result(), g.finish(), nil
}

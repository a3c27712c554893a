package calltree

import (
	"errors"
	"fmt"
	"io"

	"trueprof/internal/model"
)

// GroupStreamSamples is GroupSamples over a trace read in two passes
// (model.Stream): it groups the samples that pass f, by goroutine when
// byGoroutine, in one pass over the file, keeping none of its records
// and replaying no call tree, for the views that show samples only (the
// exports of a sampling recording). Its Samples are GroupSamples' on the
// loaded trace. A label filter gives ErrNeedsLoad; a bad thread pattern
// the error of f.Compile.
func GroupStreamSamples(s *model.Stream, f model.Filter, byGoroutine bool) (*Samples, error) {
	m, err := f.Compile()
	if err != nil {
		return nil, err
	}
	if len(f.Labels) > 0 {
		return nil, ErrNeedsLoad
	}
	rs, err := s.Records()
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	g := newGrouper(s.Profile, m, byGoroutine)
	// The samples of the time at hand wait for its goroutine switches,
	// which GroupSamples applies first, whatever their order in the file.
	var batch []model.Sample
	var at uint64
	var r model.Record
	for {
		err := rs.Next(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("grouping samples: %w", err)
		}
		if t := r.Time(); t != at {
			for i := range batch {
				g.sample(&batch[i])
			}
			batch, at = batch[:0], t
		}
		switch r.Kind {
		case model.RecordGoID:
			g.goSwitch(&r.GoID)
		case model.RecordSample:
			batch = append(batch, r.Sample)
		}
	}
	for i := range batch {
		g.sample(&batch[i])
	}
	return g.finish(), nil
}

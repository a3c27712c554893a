package trace

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// samplesOf splits recs into samples and the other records.
func samplesOf(recs []Record) (samples []*Sample, other []Record) {
	for _, r := range recs {
		if s, ok := r.(*Sample); ok {
			samples = append(samples, s)
		} else {
			other = append(other, r)
		}
	}
	return samples, other
}

func TestModeNormal(t *testing.T) {
	const limit = 64 << 10
	stream := recorderStream(50000)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), Options{Mode: ModeNormal, SizeLimit: limit, ChunkSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var accepted []Record
	var rejected int
	for _, r := range stream {
		err := w.Write(r)
		switch {
		case errors.Is(err, ErrSizeLimit):
			if _, ok := r.(*Sample); !ok {
				t.Fatalf("Write(%T) = ErrSizeLimit: only samples may be refused", r)
			}
			rejected++
		case err != nil:
			t.Fatal(err)
		default:
			if rejected > 0 {
				if _, ok := r.(*Sample); ok {
					t.Fatal("a sample was accepted after ErrSizeLimit")
				}
			}
			accepted = append(accepted, r)
		}
	}
	if rejected == 0 {
		t.Fatal("the size limit was never reached")
	}
	lost := &Lost{Time: 1, Kind: LostSize, Count: uint64(rejected)}
	if err := w.Write(lost); err != nil {
		t.Fatalf("Write(Lost) after the limit: %v", err)
	}
	accepted = append(accepted, lost)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Rejected != uint64(rejected) {
		t.Errorf("Stats().Rejected = %d, want %d", st.Rejected, rejected)
	}
	size := int64(buf.Len())
	t.Logf("limit %d, file %d bytes, %d samples refused", limit, size, rejected)
	// The records after the limit (a few Lost, Throttle, Exit, End) may
	// go slightly over; the samples stop within sizeLimitSlack below.
	if size > limit || size < limit-2*sizeLimitSlack {
		t.Errorf("file size %d, want close to the limit %d", size, limit)
	}
	h, got, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode != "normal" || h.SizeLimit != limit {
		t.Errorf("header mode %q limit %d", h.Mode, h.SizeLimit)
	}
	if !reflect.DeepEqual(got, accepted) {
		t.Errorf("read %d records, want the %d accepted", len(got), len(accepted))
	}
}

func TestModeWrap(t *testing.T) {
	const limit = 32 << 10
	stream := recorderStream(50000)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), Options{Mode: ModeWrap, SizeLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range stream {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if st := w.Stats(); st.Retained == 0 || st.Retained > limit {
		t.Errorf("Stats().Retained = %d, want in (0, %d]", st.Retained, limit)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	_, got, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	wantSamples, wantOther := samplesOf(stream)
	gotSamples, gotOther := samplesOf(got)
	t.Logf("file %d bytes; kept %d of %d samples; %+v", buf.Len(), len(gotSamples), len(wantSamples), st)

	// All non-sample records, End last, with a Lost record before it.
	end := wantOther[len(wantOther)-1]
	wantOther = append(wantOther[:len(wantOther)-1:len(wantOther)-1],
		&Lost{Time: wantSamples[st.Discarded-1].Time, Kind: LostWrap, Count: st.Discarded}, end)
	if !reflect.DeepEqual(gotOther, wantOther) {
		t.Errorf("non-sample records differ: got %d, want %d", len(gotOther), len(wantOther))
	}
	if got[len(got)-1] != gotOther[len(gotOther)-1] {
		t.Errorf("last record is %T, want *End", got[len(got)-1])
	}
	// The newest samples, in order, and the count adds up.
	if st.Discarded == 0 || st.Discarded+uint64(len(gotSamples)) != uint64(len(wantSamples)) {
		t.Errorf("discarded %d + kept %d != %d samples", st.Discarded, len(gotSamples), len(wantSamples))
	}
	if !reflect.DeepEqual(gotSamples, wantSamples[len(wantSamples)-len(gotSamples):]) {
		t.Error("kept samples are not the newest ones")
	}
	if sampleBytes := int64(buf.Len()) - writeSize(t, wantOther); sampleBytes > limit {
		t.Errorf("%d bytes of samples, limit %d", sampleBytes, limit)
	}
}

// writeSize is the size of a trace of recs alone.
func writeSize(t *testing.T, recs []Record) int64 {
	return int64(len(writeTrace(t, Options{}, recs)))
}

func TestModeWrapNothingDiscarded(t *testing.T) {
	stream := recorderStream(100)
	data := writeTrace(t, Options{Mode: ModeWrap, SizeLimit: 1 << 20}, stream)
	_, got, err := readAll(t, data)
	if err != nil {
		t.Fatal(err)
	}
	wantSamples, wantOther := samplesOf(stream)
	gotSamples, gotOther := samplesOf(got)
	if !reflect.DeepEqual(gotSamples, wantSamples) || !reflect.DeepEqual(gotOther, wantOther) {
		t.Error("records differ")
	}
}

func TestModeContinuous(t *testing.T) {
	stream := recorderStream(50000)
	// SizeLimit is ignored in continuous mode.
	data := writeTrace(t, Options{Mode: ModeContinuous, SizeLimit: 1000, ChunkSize: 8 << 10}, stream)
	h, got, err := readAll(t, data)
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode != "continuous" || h.SizeLimit != 0 {
		t.Errorf("header mode %q limit %d", h.Mode, h.SizeLimit)
	}
	if !reflect.DeepEqual(got, stream) {
		t.Errorf("read %d records, want %d", len(got), len(stream))
	}
}

// TestFlush checks that Flush makes every record so far readable, as the
// recorder's one-second ticker relies on.
func TestFlush(t *testing.T) {
	stream := recorderStream(1000)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range stream {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		if i%300 != 0 {
			continue
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		// Reading what a SIGKILL would leave behind right now.
		_, got, err := readAll(t, bytes.Clone(buf.Bytes()))
		if err != nil || !reflect.DeepEqual(got, stream[:i+1]) {
			t.Fatalf("after Flush at record %d: read %d records, err %v", i, len(got), err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

package trace

import (
	"errors"
	"io"
	"reflect"
	"testing"
)

// TestCalibrationRecordRoundTrip writes an in-run calibration, fitted and
// refused, and reads the same back; a record without a calibration is
// refused by the writer.
func TestCalibrationRecordRoundTrip(t *testing.T) {
	recs := []Record{
		&CalibrationRecord{Calibration: &Calibration{Mechanism: "hook", Statistic: "fit", Source: "in-run", Bursts: 2,
			Overhead: [Transitions]float64{8.5, 25.25, 28, 7.75}, PerCall: 34.75, Samples: 6000, Resolution: 80.5,
			Fit: []FitShape{{Name: "mixed", Calls: 800, BodyNS: 300, Uninstrumented: 7e4, Calibrated: 7.1e4, Raw: 9e4}}}},
		&CalibrationRecord{Calibration: &Calibration{Mechanism: "hook", Refused: "shape long residual +7.5%"}},
	}
	_, got, err := readAll(t, writeTrace(t, Options{}, recs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, recs) {
		t.Errorf("read %#v, wrote %#v", got, recs)
	}
	w, err := NewWriter(io.Discard, testHeader(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&CalibrationRecord{}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("writing an empty CalibrationRecord: %v, want ErrInvalidRecord", err)
	}
}

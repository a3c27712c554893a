package trace

import (
	"bytes"
	"io"
	"testing"
)

// BenchmarkWriteSample writes the samples of a realistic stream (see
// recorderStream) and reports the file bytes per sample.
func BenchmarkWriteSample(b *testing.B) {
	stream := recorderStream(100_000)
	samples, other := samplesOf(stream)
	var buf bytes.Buffer
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%len(samples) == 0 {
			buf.Reset()
			b.StopTimer()
			w, err := NewWriter(&buf, testHeader(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range other {
				if err := w.Write(r); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			benchWriter = w
		}
		if err := benchWriter.Write(samples[i%len(samples)]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	benchWriter.Close()

	// Bytes per sample of a whole file, metadata included.
	data := writeTrace(b, Options{}, stream)
	b.ReportMetric(float64(len(data))/float64(len(samples)), "file-B/sample")
	// Before compression: the size of the sample records alone.
	var c chunkBuilder
	for _, s := range samples {
		c.add(s)
	}
	b.ReportMetric(float64(len(c.raw))/float64(len(samples)), "raw-B/sample")
}

var benchWriter *Writer

// BenchmarkReadSample reads a file of a million realistic samples.
func BenchmarkReadSample(b *testing.B) {
	const n = 1_000_000
	data := writeTrace(b, Options{}, recorderStream(n))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		readEach(b, data, (*Reader).Next)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/sample")
}

// BenchmarkScan reads a million events with Next (a record allocated
// each) and with Scan (none).
func BenchmarkScan(b *testing.B) {
	const n = 1_000_000
	data := writeTrace(b, Options{}, eventStream(n/2))
	for _, bc := range []struct {
		name string
		next func(*Reader) (Record, error)
	}{{"next", (*Reader).Next}, {"scan", (*Reader).Scan}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				readEach(b, data, bc.next)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/event")
		})
	}
}

// readEach reads every record of the trace data with next.
func readEach(b *testing.B, data []byte, next func(*Reader) (Record, error)) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		b.Fatal(err)
	}
	for {
		_, err := next(r)
		if err == io.EOF {
			return
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeEvent encodes the events of an instrumented recording
// (see eventStream) into chunks, as the recording loop does for each
// event; compression is the pipeline's, on another goroutine.
func BenchmarkEncodeEvent(b *testing.B) {
	var evs []*Event
	for _, r := range eventStream(10_000) {
		if e, ok := r.(*Event); ok {
			evs = append(evs, e)
		}
	}
	var c chunkBuilder
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := c.add(evs[i%len(evs)]); err != nil {
			b.Fatal(err)
		}
		if len(c.raw) >= DefaultChunkSize {
			c.reset()
		}
	}
}

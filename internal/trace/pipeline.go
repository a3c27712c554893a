package trace

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// pipeline compresses a Writer's chunks and writes them to the file on a
// goroutine of its own, in the order the Writer hands them over. zstd
// costs about 20 ns per hook event, a fifth of the recorder's time per
// event; on its own goroutine it runs on another core while the
// recording loop decodes, resolves and encodes the next events. The
// queue is bounded (pipelineDepth chunks), so a compressor that falls
// behind makes the Writer wait instead of letting memory grow.
//
// The goroutine owns the encoder, the file and, in wrap mode, the
// retained chunks (wrapStore). The Writer reads them only after sync,
// which returns once every earlier job is done and the goroutine waits
// for the next: the channel gives the happens-before.
type pipeline struct {
	w    io.Writer
	enc  *zstd.Encoder
	jobs chan job
	free chan []byte // raw buffers handed back for reuse
	done chan struct{}
	// bufSize is the capacity of a new raw buffer: a chunk's size plus
	// one record.
	bufSize int

	// Owned by the goroutine (see above).
	out      []byte // scratch: the chunk being written
	chunks   uint64
	rawBytes int64
	store    *wrapStore // wrap mode only

	// size is the number of bytes written to w; inflight bounds the
	// bytes of the chunks queued but not written yet (their raw size
	// plus a header each, since a chunk that does not compress is
	// stored as is). The goroutine updates size before inflight, so a
	// reader that loads inflight first never undercounts.
	size     atomic.Int64
	inflight atomic.Int64
	fail     atomic.Pointer[error] // the first write error
	stopped  bool                  // the goroutine has ended (Writer's side)
}

// pipelineDepth is the number of chunks the Writer may queue ahead of
// the compressor: at the default 256 KiB chunk, 4 MiB of raw records,
// some 15 ms of compression, enough to smooth over the loop's bursts.
const pipelineDepth = 16

// jobKind is what the pipeline does with a job.
type jobKind uint8

const (
	jobWrite  jobKind = iota // compress raw and write it to the file
	jobRetain                // wrap mode: compress raw and keep it in the store
	jobStored                // write data (a complete chunk) as it is
	jobSync                  // close sync: every earlier job is done
)

// job is one chunk handed to the pipeline.
type job struct {
	kind    jobKind
	raw     []byte // jobWrite, jobRetain: the records; jobStored: the chunk
	records uint32
	items   uint32 // jobRetain: the samples and events of the records
	// Wrap mode: the thread and the times of the first and last sample
	// or event of the chunk.
	thread      threadKey
	first, last uint64
	sync        chan struct{}
}

// newPipeline returns a pipeline for w whose goroutine has not started:
// the file header is written first (write), then start.
func newPipeline(w io.Writer, enc *zstd.Encoder, bufSize int, store *wrapStore) *pipeline {
	return &pipeline{w: w, enc: enc, bufSize: bufSize, store: store,
		jobs: make(chan job, pipelineDepth), free: make(chan []byte, 2*pipelineDepth), done: make(chan struct{})}
}

func (p *pipeline) start() { go p.run() }

func (p *pipeline) run() {
	defer close(p.done)
	for j := range p.jobs {
		p.do(j)
	}
}

// do carries out one job.
func (p *pipeline) do(j job) {
	switch j.kind {
	case jobSync:
		close(j.sync)
		return
	case jobStored:
		p.write(j.raw)
		p.chunks++
		return
	case jobWrite:
		p.out = p.encode(p.out[:0], j.raw, j.records)
		p.write(p.out)
		p.chunks++
		p.inflight.Add(-int64(len(j.raw) + chunkHeaderSize))
	case jobRetain:
		p.store.add(j.thread, storedChunk{data: slices.Clone(p.encode(p.out[:0], j.raw, j.records)),
			records: j.items, first: j.first, last: j.last}, p.outside())
	}
	p.rawBytes += int64(len(j.raw))
	p.recycle(j.raw)
}

// recycle offers b for reuse by buffer; either goroutine may call it.
func (p *pipeline) recycle(b []byte) {
	select {
	case p.free <- b[:0]:
	default:
	}
}

// buffer returns an empty raw buffer, a recycled one if any.
func (p *pipeline) buffer() []byte {
	select {
	case b := <-p.free:
		return b
	default:
		return make([]byte, 0, p.bufSize)
	}
}

// send queues the records of raw for compression (kind jobWrite or
// jobRetain); raw belongs to the pipeline from now on.
func (p *pipeline) send(j job) {
	if j.kind == jobWrite {
		p.inflight.Add(int64(len(j.raw) + chunkHeaderSize))
	}
	p.jobs <- j
}

// sync waits until every job sent so far is done. After it the Writer
// may read the goroutine's fields until its next send.
func (p *pipeline) sync() {
	if p.stopped {
		return
	}
	ch := make(chan struct{})
	p.jobs <- job{kind: jobSync, sync: ch}
	<-ch
}

// stop ends the goroutine once every job sent is done and releases the
// encoder.
func (p *pipeline) stop() {
	if p.stopped {
		return
	}
	close(p.jobs)
	<-p.done
	p.stopped = true
	p.enc.Close()
}

// err returns the first write error, nil if none.
func (p *pipeline) err() error {
	if e := p.fail.Load(); e != nil {
		return *e
	}
	return nil
}

// outside is what wrap mode's store leaves to the other records: the
// file written so far and room for the chunk Close adds last (a Lost
// and an End record: some 60 bytes with the chunk's header).
func (p *pipeline) outside() int64 { return p.size.Load() + 256 }

// written bounds the file's size once every queued chunk is written.
func (p *pipeline) written() int64 {
	in := p.inflight.Load()
	return p.size.Load() + in
}

// write writes b with one call, keeping the first error; after one it
// writes nothing more.
func (p *pipeline) write(b []byte) {
	if p.fail.Load() != nil {
		return
	}
	n, err := p.w.Write(b)
	p.size.Add(int64(n))
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("trace: writing: %w", err)
		p.fail.Store(&err)
	}
}

// encode appends the chunk header and compressed payload of raw, which
// holds records records, to dst. A chunk that zstd cannot shrink is
// stored uncompressed.
func (p *pipeline) encode(dst, raw []byte, records uint32) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, chunkHeaderSize)...)
	dst = p.enc.EncodeAll(raw, dst)
	codec := byte(codecZstd)
	if len(dst)-start-chunkHeaderSize >= len(raw) {
		dst = append(dst[:start+chunkHeaderSize], raw...)
		codec = codecStored
	}
	payload := dst[start+chunkHeaderSize:]
	h := dst[start : start+chunkHeaderSize]
	copy(h, chunkMagic)
	h[4] = codec
	h[5], h[6], h[7] = 0, 0, 0
	binary.LittleEndian.PutUint32(h[8:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(raw)))
	binary.LittleEndian.PutUint32(h[16:], records)
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	return dst
}

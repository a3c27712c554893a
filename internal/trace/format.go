package trace

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// File layout constants. docs/trace-format.md is the normative
// description; every number here is part of the format.
const (
	// fileMagic starts every trace. The leading 0x89 byte (as in PNG) is
	// not ASCII, so text tools that mangle bytes ≥ 0x80 or newlines are
	// caught by the magic check instead of producing odd decode errors.
	fileMagic = "\x89TPTRACE"
	// fileHeaderFixed is magic, u32 version and u32 JSON length.
	fileHeaderFixed = len(fileMagic) + 4 + 4
	// maxHeaderJSON bounds the JSON header before it is allocated. Real
	// headers are a few hundred bytes; a long command line fits easily.
	maxHeaderJSON = 1 << 20

	// chunkMagic starts every chunk, so that a dump or a future resync
	// tool can find chunk boundaries.
	chunkMagic = "TPCK"
	// chunkHeaderSize is the size of the fixed chunk header.
	chunkHeaderSize = 28

	// MaxChunkSize bounds the uncompressed size of a chunk. Readers
	// refuse larger chunks before allocating anything for them.
	MaxChunkSize = 64 << 20
	// maxStoredSize bounds a chunk's payload as stored in the file. It
	// exceeds MaxChunkSize only by zstd's worst-case expansion of
	// incompressible data (the Writer stores such chunks uncompressed,
	// but the bound keeps readers agnostic of that choice).
	maxStoredSize = MaxChunkSize + MaxChunkSize/64 + 1024

	// DefaultChunkSize is the uncompressed chunk size at which a Writer
	// ends a chunk when Options.ChunkSize is zero. Small enough that
	// compression keeps pace with the recorder's backlog after a
	// target exits, rather than a 1 MiB chunk's 3-11 ms of zstd left
	// for Close (400,002 hook events: exit to trace written 22.4 ms
	// with 1 MiB chunks, 18.7 with 256 KiB); larger chunks barely
	// compress better (6.11 and 6.17 bytes a sample at 1 MiB and 256
	// KiB, 0.292 and 0.293 bytes a hook event).
	DefaultChunkSize = 256 << 10
)

// Chunk codecs (byte 4 of the chunk header).
const (
	codecStored = 0 // payload is the raw record bytes
	codecZstd   = 1 // payload is one zstd frame
)

// timedBit is set in a record's first byte when the record body starts
// with a timestamp delta. It is separate from the major code so that a
// reader can keep the delta chain intact across records it does not
// know (forward compatibility).
const timedBit = 0x80

// Sample minor code bits above the Sample flags. They elide fields equal
// to those of the previous sample in the same chunk: with a handful of
// threads most samples repeat the previous sample's PID, TID, CPU and
// period, and eliding them halves a sample's size before compression.
const (
	sampleFlagMask   = 0x1f // Sample.Flags bits that fit the minor code
	sampleSameThread = 0x20 // PID and TID equal the previous sample's
	sampleSameCPU    = 0x40 // CPU equals the previous sample's
	sampleSamePeriod = 0x80 // Period equals the previous sample's
)

// Event minor code: the kind in the low bits, and a bit eliding the
// thread when it equals the previous event's in the same chunk.
const (
	eventKindMask   = 0x0f
	eventSameThread = 0x20
)

// majorEventRun is the major code of a run of events (version 2): the
// events of the previous event's thread that followed it closely, of
// functions under 256, two bytes each, which readers hand out as
// Events. Instrumented traces are nearly all such events; as records
// of their own they took five bytes each, and the compressor's time
// and the recorder's backlog grew with them.
const majorEventRun Major = 26

// majorEventRunWide is the major code of a run of events whose
// functions take two bytes (version 3): a real program's hooked
// functions are hundreds to thousands of locations, so that in a
// -finstrument-functions build of SQLite at -O2 four events in five
// had a function beyond 255 and were written as records of their own,
// five or six bytes each and the recorder's slow path.
const majorEventRunWide Major = 27

// maxRunEvents is the most events the Writer puts in one run: its body
// length then takes one byte.
const maxRunEvents = 63

// maxWideRunEvents is maxRunEvents for a run of majorEventRunWide.
const maxWideRunEvents = 42

// maxRunFunction bounds the function of an event in a run, and
// maxNarrowFunction of one in a run of majorEventRun.
const (
	maxRunFunction    = 1<<16 - 1
	maxNarrowFunction = 1<<8 - 1
)

// runEventMaxDelta bounds the time delta of an event in a run (7 bits).
const runEventMaxDelta = 1 << 7

// castagnoli is the CRC-32C table: hardware-accelerated on amd64 and
// arm64, and better at catching burst errors than IEEE CRC-32.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sentinel errors. Reader errors are *FormatError values wrapping one of
// these, so callers test them with errors.Is.
var (
	// ErrTruncated: the file ended inside the header or a chunk, as
	// happens when the recorder was killed mid-write.
	ErrTruncated = errors.New("truncated file")
	// ErrChecksum: a header or chunk does not match its CRC-32C.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrCorrupt: the bytes are well checksummed but do not decode
	// (bad magic, impossible sizes, malformed records).
	ErrCorrupt = errors.New("corrupt data")
	// ErrVersion: the file was written by a newer, incompatible version
	// of the format.
	ErrVersion = errors.New("unsupported format version")
	// ErrSizeLimit is returned by Writer.Write for a *Sample once a
	// normal-mode trace has reached Options.SizeLimit.
	ErrSizeLimit = errors.New("trace: size limit reached")
	// ErrInvalidRecord is returned by Writer.Write for a record it
	// cannot encode (nil, an unknown type, reserved flag bits).
	ErrInvalidRecord = errors.New("trace: invalid record")
	// ErrClosed is returned by Writer methods after Close.
	ErrClosed = errors.New("trace: writer closed")
)

// FormatError reports a malformed trace file: Offset is the byte offset
// of the header or chunk that could not be read, and Err wraps one of
// ErrTruncated, ErrChecksum, ErrCorrupt or ErrVersion. It plays the role
// of debug/dwarf's DecodeError.
type FormatError struct {
	Offset int64
	Err    error
}

// Error returns "trace: byte offset N: " followed by the cause.
func (e *FormatError) Error() string {
	return fmt.Sprintf("trace: byte offset %d: %v", e.Offset, e.Err)
}

// Unwrap returns e.Err, so that errors.Is(err, ErrTruncated) works.
func (e *FormatError) Unwrap() error { return e.Err }

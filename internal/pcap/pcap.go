// Package pcap reads and writes classic libpcap capture files, the minimum
// that tests need to record RoCE traffic and feed it to tshark: a writer
// that allocates nothing per packet and a reader that reuses its buffer.
//
// File format: a 24-byte global header (magic, version 2.4, zone, sigfigs,
// snaplen, link type) followed by records of a 16-byte header (seconds,
// micro- or nanoseconds, captured length, original length) and the data.
package pcap

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// LinkType is the pcap LINKTYPE_ value of every packet in a file.
type LinkType uint32

// Link types used in softib captures.
const (
	LinkTypeEthernet LinkType = 1   // Ethernet II frames
	LinkTypeRaw      LinkType = 101 // raw IPv4 or IPv6 packets (version nibble decides)
	LinkTypeIPv4     LinkType = 228 // raw IPv4 packets
	LinkTypeIPv6     LinkType = 229 // raw IPv6 packets
)

const (
	magicMicro = 0xA1B2C3D4
	magicNano  = 0xA1B23C4D
	fileHdrLen = 24
	recHdrLen  = 16
	// DefaultSnapLen is the snapshot length written in the file header.
	DefaultSnapLen = 262144
)

// Errors returned by the reader.
var (
	ErrBadMagic  = errors.New("pcap: not a pcap file")
	ErrBadRecord = errors.New("pcap: bad record length")
)

// Writer writes a pcap file with microsecond timestamps. It is safe for
// concurrent use (a mutex serialises records), so a test can tap several
// goroutines into one file.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	hdr [recHdrLen]byte // guarded by mu
}

// NewWriter writes the file header to w and returns a Writer.
func NewWriter(w io.Writer, lt LinkType) (*Writer, error) {
	var h [fileHdrLen]byte
	if _, err := w.Write(AppendFileHeader(h[:0], lt)); err != nil {
		return nil, err
	}
	return &Writer{w: w}, nil
}

// FileHeaderLen is the length of a pcap file header.
const FileHeaderLen = fileHdrLen

// AppendFileHeader appends a file header (microsecond timestamps, the
// default snap length, link type lt) to dst.
func AppendFileHeader(dst []byte, lt LinkType) []byte {
	var h [fileHdrLen]byte
	binary.LittleEndian.PutUint32(h[0:], magicMicro)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], DefaultSnapLen)
	binary.LittleEndian.PutUint32(h[20:], uint32(lt))
	return append(dst, h[:]...)
}

// AppendRecord appends one record (header and data) with timestamp ts to
// dst, for writers that must hand a record to their io.Writer in one
// Write call (so that several sources can share one file). Data longer
// than the snap length is truncated; the original length is kept.
func AppendRecord(dst []byte, ts time.Time, data []byte) []byte {
	orig := len(data)
	if len(data) > DefaultSnapLen {
		data = data[:DefaultSnapLen]
	}
	us := ts.UnixMicro()
	var h [recHdrLen]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(us/1e6))
	binary.LittleEndian.PutUint32(h[4:], uint32(us%1e6))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(h[12:], uint32(orig))
	dst = append(dst, h[:]...)
	return append(dst, data...)
}

// WritePacket appends one record with timestamp ts. Data longer than the
// snap length is truncated (the original length is kept in the record).
func (w *Writer) WritePacket(ts time.Time, data []byte) error {
	orig := len(data)
	if len(data) > DefaultSnapLen {
		data = data[:DefaultSnapLen]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	us := ts.UnixMicro()
	binary.LittleEndian.PutUint32(w.hdr[0:], uint32(us/1e6))
	binary.LittleEndian.PutUint32(w.hdr[4:], uint32(us%1e6))
	binary.LittleEndian.PutUint32(w.hdr[8:], uint32(len(data)))
	binary.LittleEndian.PutUint32(w.hdr[12:], uint32(orig))
	if _, err := w.w.Write(w.hdr[:]); err != nil {
		return err
	}
	_, err := w.w.Write(data)
	return err
}

// Record is one packet read from a file.
type Record struct {
	Time    time.Time
	OrigLen int    // length on the wire
	Data    []byte // captured bytes; from Reader.Next, valid until its next call
}

// Reader reads a pcap file written by any libpcap-compatible tool
// (either byte order, micro- or nanosecond timestamps).
type Reader struct {
	r        io.Reader
	bo       binary.ByteOrder
	nano     bool
	linkType LinkType
	snapLen  uint32
	hdr      [recHdrLen]byte
	buf      []byte
}

// NewReader reads the file header from r.
func NewReader(r io.Reader) (*Reader, error) {
	var h [fileHdrLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, ErrBadMagic
		}
		return nil, err
	}
	rd := &Reader{r: r}
	switch {
	case binary.LittleEndian.Uint32(h[0:]) == magicMicro:
		rd.bo = binary.LittleEndian
	case binary.LittleEndian.Uint32(h[0:]) == magicNano:
		rd.bo, rd.nano = binary.LittleEndian, true
	case binary.BigEndian.Uint32(h[0:]) == magicMicro:
		rd.bo = binary.BigEndian
	case binary.BigEndian.Uint32(h[0:]) == magicNano:
		rd.bo, rd.nano = binary.BigEndian, true
	default:
		return nil, ErrBadMagic
	}
	rd.snapLen = rd.bo.Uint32(h[16:])
	// The low 28 bits are the link type; the top bits carry FCS info.
	rd.linkType = LinkType(rd.bo.Uint32(h[20:]) & 0x0FFFFFFF)
	return rd, nil
}

// LinkType returns the file's link type.
func (r *Reader) LinkType() LinkType { return r.linkType }

// Next returns the next record, or io.EOF at the end of the file.
//
// The record's Data aliases the Reader's one buffer, which the following
// call overwrites (and may reallocate): so that reading a capture
// allocates only when a record is larger than any before it. A caller
// that keeps Data past the next call must copy it (bytes.Clone), as
// [ReadFile] does.
func (r *Reader) Next() (Record, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = ErrBadRecord
		}
		return Record{}, err
	}
	sec := r.bo.Uint32(r.hdr[0:])
	frac := r.bo.Uint32(r.hdr[4:])
	incl := r.bo.Uint32(r.hdr[8:])
	orig := r.bo.Uint32(r.hdr[12:])
	// Accept records up to the larger of the file's snaplen and our
	// default, but never trust an absurd length from a corrupt file.
	if incl > max(r.snapLen, DefaultSnapLen) || incl > 1<<24 {
		return Record{}, ErrBadRecord
	}
	if cap(r.buf) < int(incl) {
		r.buf = make([]byte, incl)
	}
	r.buf = r.buf[:incl]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		return Record{}, ErrBadRecord
	}
	ns := int64(frac)
	if !r.nano {
		ns *= 1000
	}
	return Record{Time: time.Unix(int64(sec), ns), OrigLen: int(orig), Data: r.buf}, nil
}

// ReadFile reads a whole capture file and returns its link type and
// records (with Data copied, so they stay valid).
func ReadFile(path string) (LinkType, []Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	r, err := NewReader(f)
	if err != nil {
		return 0, nil, err
	}
	var recs []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return r.LinkType(), recs, nil
		}
		if err != nil {
			return r.LinkType(), recs, err
		}
		rec.Data = append([]byte(nil), rec.Data...)
		recs = append(recs, rec)
	}
}

// EtherType values for AppendEthernet.
const (
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
)

// AppendEthernet appends an Ethernet II frame (no FCS) carrying payload to
// dst, for LinkTypeEthernet captures.
func AppendEthernet(dst []byte, dstMAC, srcMAC [6]byte, etherType uint16, payload []byte) []byte {
	dst = append(dst, dstMAC[:]...)
	dst = append(dst, srcMAC[:]...)
	dst = binary.BigEndian.AppendUint16(dst, etherType)
	return append(dst, payload...)
}

package pcap_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"softib/internal/pcap"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf, pcap.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 123456000)
	pkts := [][]byte{{0x45, 1, 2, 3}, {}, bytes.Repeat([]byte{0xAB}, 3000)}
	for i, p := range pkts {
		if err := w.WritePacket(ts.Add(time.Duration(i)*time.Millisecond), p); err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len() != 24+3*16+4+3000 {
		t.Fatalf("file length %d", buf.Len())
	}
	r, err := pcap.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != pcap.LinkTypeRaw {
		t.Errorf("link type %d", r.LinkType())
	}
	for i, p := range pkts {
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.Data, p) || rec.OrigLen != len(p) ||
			!rec.Time.Equal(ts.Add(time.Duration(i)*time.Millisecond)) {
			t.Errorf("record %d: %v len %d", i, rec.Time, len(rec.Data))
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("end: %v", err)
	}
}

func TestWriterAllocs(t *testing.T) {
	w, _ := pcap.NewWriter(io.Discard, pcap.LinkTypeEthernet)
	data := make([]byte, 100)
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() { _ = w.WritePacket(now, data) }); n != 0 {
		t.Errorf("WritePacket allocates %v", n)
	}
}

func TestReaderVariants(t *testing.T) {
	// Big-endian, nanosecond file written by hand.
	var b bytes.Buffer
	h := make([]byte, 24)
	binary.BigEndian.PutUint32(h[0:], 0xA1B23C4D)
	binary.BigEndian.PutUint16(h[4:], 2)
	binary.BigEndian.PutUint16(h[6:], 4)
	binary.BigEndian.PutUint32(h[16:], 65535)
	binary.BigEndian.PutUint32(h[20:], 1)
	b.Write(h)
	rh := make([]byte, 16)
	binary.BigEndian.PutUint32(rh[0:], 10)
	binary.BigEndian.PutUint32(rh[4:], 7)
	binary.BigEndian.PutUint32(rh[8:], 2)
	binary.BigEndian.PutUint32(rh[12:], 60)
	b.Write(rh)
	b.Write([]byte{9, 8})
	r, err := pcap.NewReader(&b)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Next()
	if err != nil || r.LinkType() != pcap.LinkTypeEthernet || rec.OrigLen != 60 ||
		!rec.Time.Equal(time.Unix(10, 7)) || !bytes.Equal(rec.Data, []byte{9, 8}) {
		t.Errorf("rec %+v err %v", rec, err)
	}

	if _, err := pcap.NewReader(bytes.NewReader([]byte("not a pcap file at all!!"))); err != pcap.ErrBadMagic {
		t.Errorf("bad magic: %v", err)
	}
	if _, err := pcap.NewReader(bytes.NewReader(nil)); err != pcap.ErrBadMagic {
		t.Errorf("empty: %v", err)
	}
	// Truncated record and absurd length.
	var c bytes.Buffer
	w, _ := pcap.NewWriter(&c, pcap.LinkTypeRaw)
	_ = w.WritePacket(time.Now(), []byte{1, 2, 3, 4})
	trunc := c.Bytes()[:c.Len()-1]
	r, _ = pcap.NewReader(bytes.NewReader(trunc))
	if _, err := r.Next(); err != pcap.ErrBadRecord {
		t.Errorf("truncated: %v", err)
	}
	huge := bytes.Clone(c.Bytes())
	binary.LittleEndian.PutUint32(huge[24+8:], 1<<30)
	r, _ = pcap.NewReader(bytes.NewReader(huge))
	if _, err := r.Next(); err != pcap.ErrBadRecord {
		t.Errorf("huge: %v", err)
	}
}

func TestReadFileEthernet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := pcap.NewWriter(f, pcap.LinkTypeEthernet)
	frame := pcap.AppendEthernet(nil, [6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 1}, pcap.EtherTypeIPv4, []byte{0x45})
	_ = w.WritePacket(time.Unix(1, 0), frame)
	_ = w.WritePacket(time.Unix(2, 0), frame)
	f.Close()
	lt, recs, err := pcap.ReadFile(path)
	if err != nil || lt != pcap.LinkTypeEthernet || len(recs) != 2 {
		t.Fatalf("lt %d recs %d err %v", lt, len(recs), err)
	}
	if !bytes.Equal(recs[0].Data, frame) || len(frame) != 15 || frame[12] != 0x08 {
		t.Errorf("frame %x", recs[0].Data)
	}
	if _, _, err := pcap.ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file")
	}
}

// TestAppendRecord writes a file from AppendFileHeader and AppendRecord
// and reads it back, and checks that the append helpers allocate nothing
// into a buffer with room.
func TestAppendRecord(t *testing.T) {
	ts := time.Unix(1700000000, 123456000)
	b := pcap.AppendFileHeader(nil, pcap.LinkTypeRaw)
	b = pcap.AppendRecord(b, ts, []byte{1, 2, 3})
	b = pcap.AppendRecord(b, ts, []byte{4})
	r, err := pcap.NewReader(bytes.NewReader(b))
	if err != nil || r.LinkType() != pcap.LinkTypeRaw {
		t.Fatalf("reader: %v, link type %d", err, r.LinkType())
	}
	for _, want := range [][]byte{{1, 2, 3}, {4}} {
		rec, err := r.Next()
		if err != nil || !bytes.Equal(rec.Data, want) || !rec.Time.Equal(ts) || rec.OrigLen != len(want) {
			t.Fatalf("record %+v, %v; want %v at %v", rec, err, want, ts)
		}
	}
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = pcap.AppendRecord(buf[:0], ts, []byte{1, 2}) }); n != 0 {
		t.Errorf("AppendRecord: %v allocations", n)
	}
}

// TestReaderReusesBuffer pins the contract Next documents: a record's Data
// is overwritten by the next call (no allocation per record), and ReadFile
// copies each record so all of them stay valid.
func TestReaderReusesBuffer(t *testing.T) {
	ts := time.Unix(1700000000, 0)
	b := pcap.AppendFileHeader(nil, pcap.LinkTypeRaw)
	b = pcap.AppendRecord(b, ts, []byte{1, 2, 3})
	b = pcap.AppendRecord(b, ts, []byte{4, 5, 6})
	r, err := pcap.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Data, []byte{4, 5, 6}) {
		t.Errorf("first record's Data after the second Next = %v, want the second record's bytes (buffer reused)", first.Data)
	}
	path := filepath.Join(t.TempDir(), "two.pcap")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, recs, err := pcap.ReadFile(path)
	if err != nil || len(recs) != 2 || !bytes.Equal(recs[0].Data, []byte{1, 2, 3}) || !bytes.Equal(recs[1].Data, []byte{4, 5, 6}) {
		t.Errorf("ReadFile = %v, %v; want both records intact", recs, err)
	}
}

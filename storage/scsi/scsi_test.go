package scsi

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

func newTarget(t *testing.T, size int64) (*Target, *LUN) {
	t.Helper()
	tg := NewTarget()
	l, err := tg.AddLUN(0, NewMemBackend(size), LUNConfig{MaxTransfer: 512 << 10, Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	return tg, l
}

func rw10(op byte, lba uint32, n uint16) []byte {
	c := make([]byte, 16)
	c[0] = op
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint16(c[7:], n)
	return c
}

func rw16(op byte, lba uint64, n uint32) []byte {
	c := make([]byte, 16)
	c[0] = op
	binary.BigEndian.PutUint64(c[2:], lba)
	binary.BigEndian.PutUint32(c[10:], n)
	return c
}

func wantCheck(t *testing.T, r Result, s Sense) {
	t.Helper()
	if r.Status != StatusCheckCondition || r.Sense != s {
		t.Fatalf("got %+v, want CHECK CONDITION %+v", r, s)
	}
}

func TestReadWrite(t *testing.T) {
	tg, _ := newTarget(t, 1<<20)
	data := bytes.Repeat([]byte("softib!!"), 512) // 4 KiB
	if r := tg.Execute(0, rw10(OpWrite10, 8, 8), data); r.Status != StatusGood {
		t.Fatalf("write: %+v", r)
	}
	got := make([]byte, 4096)
	if r := tg.Execute(0, rw16(OpRead16, 8, 8), got); r.Status != StatusGood || r.DataIn != 4096 || !bytes.Equal(got, data) {
		t.Fatalf("read: %+v", r)
	}
	wantCheck(t, tg.Execute(0, rw10(OpRead10, 2047, 2), got), SenseLBAOutOfRange)
	wantCheck(t, tg.Execute(0, rw16(OpWrite16, 1<<63, 1), got), SenseLBAOutOfRange)
	wantCheck(t, tg.Execute(0, rw10(OpRead10, 0, 9), got), SenseInvalidFieldCDB) // buffer too small
	wantCheck(t, tg.Execute(1, rw10(OpRead10, 0, 1), got), SenseLUNNotSupported)
	wantCheck(t, tg.Execute(0, []byte{0xc7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, got), SenseInvalidOpcode)
	wantCheck(t, tg.Execute(0, []byte{0x2f}, got), SenseInvalidFieldCDB)
	if r := tg.Execute(0, rw10(OpRead10, 2047, 1), got); r.Status != StatusGood {
		t.Fatalf("last block: %+v", r)
	}
}

func TestCapacityInquiryModeSense(t *testing.T) {
	tg, _ := newTarget(t, 1<<20)
	buf := make([]byte, 512)
	r := tg.Execute(0, []byte{OpReadCapacity10, 0, 0, 0, 0, 0, 0, 0, 0, 0}, buf)
	if r.DataIn != 8 || binary.BigEndian.Uint32(buf) != 2047 || binary.BigEndian.Uint32(buf[4:]) != 512 {
		t.Fatalf("rc10 %+v % x", r, buf[:8])
	}
	c := make([]byte, 16)
	c[0], c[1], c[13] = OpServiceActionIn, saReadCapacity16, 32
	r = tg.Execute(0, c, buf)
	if r.DataIn != 32 || binary.BigEndian.Uint64(buf) != 2047 || buf[14]&0x80 == 0 {
		t.Fatalf("rc16 %+v", r)
	}
	r = tg.Execute(0, []byte{OpInquiry, 0, 0, 0, 96, 0}, buf)
	if r.DataIn != 66 || string(buf[8:16]) != vendorID || buf[0] != 0 {
		t.Fatalf("inquiry %+v %q", r, buf[:36])
	}
	r = tg.Execute(0, []byte{OpInquiry, 1, 0, 0, 255, 0}, buf)
	if !bytes.Equal(buf[4:r.DataIn], vpdPages) {
		t.Fatalf("vpd 0: % x", buf[:r.DataIn])
	}
	for _, p := range vpdPages {
		r = tg.Execute(0, []byte{OpInquiry, 1, p, 0, 255, 0}, buf)
		if r.Status != StatusGood || buf[1] != p || int(binary.BigEndian.Uint16(buf[2:]))+4 != r.DataIn {
			t.Fatalf("vpd %#x: %+v % x", p, r, buf[:r.DataIn])
		}
	}
	wantCheck(t, tg.Execute(0, []byte{OpInquiry, 1, 0x99, 0, 255, 0}, buf), SenseInvalidFieldCDB)
	// Allocation length truncates.
	if r = tg.Execute(0, []byte{OpInquiry, 0, 0, 0, 5, 0}, buf); r.DataIn != 5 {
		t.Fatalf("truncated inquiry %+v", r)
	}
	// An absent LUN answers INQUIRY with qualifier 3.
	if r = tg.Execute(7, []byte{OpInquiry, 0, 0, 0, 36, 0}, buf); r.Status != StatusGood || buf[0] != 0x7f {
		t.Fatalf("absent lun inquiry %+v %x", r, buf[0])
	}
	r = tg.Execute(0, []byte{OpModeSense6, 0, 0x3f, 0, 255, 0}, buf)
	if r.Status != StatusGood || int(buf[0])+1 != r.DataIn || buf[4] != 0x08 || buf[24] != 0x0a {
		t.Fatalf("mode sense 6 %+v % x", r, buf[:r.DataIn])
	}
	r = tg.Execute(0, []byte{OpModeSense10, 0, 0x08, 0, 0, 0, 0, 1, 0, 0}, buf)
	if r.Status != StatusGood || int(binary.BigEndian.Uint16(buf))+2 != r.DataIn || buf[8] != 0x08 {
		t.Fatalf("mode sense 10 %+v % x", r, buf[:r.DataIn])
	}
	wantCheck(t, tg.Execute(0, []byte{OpModeSense6, 0, 0x1c, 0, 255, 0}, buf), SenseInvalidFieldCDB)
	r = tg.Execute(0, []byte{OpRequestSense, 0, 0, 0, 252, 0}, buf)
	if s, ok := ParseFixed(buf[:r.DataIn]); !ok || s != (Sense{}) {
		t.Fatalf("request sense %+v", r)
	}
	for _, op := range []byte{OpTestUnitReady, OpSyncCache10} {
		if r := tg.Execute(0, []byte{op, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil); r.Status != StatusGood {
			t.Fatalf("%#x: %+v", op, r)
		}
	}
}

func TestReportLUNs(t *testing.T) {
	tg, _ := newTarget(t, 4096)
	if _, err := tg.AddLUN(300, NewMemBackend(4096), LUNConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.AddLUN(300, NewMemBackend(4096), LUNConfig{}); err == nil {
		t.Fatal("duplicate LUN accepted")
	}
	buf := make([]byte, 64)
	c := make([]byte, 12)
	c[0], c[9] = OpReportLUNs, 64
	r := tg.Execute(5, c, buf)
	if r.DataIn != 24 || binary.BigEndian.Uint32(buf) != 16 {
		t.Fatalf("%+v % x", r, buf[:r.DataIn])
	}
	for i, want := range []uint64{0, 300} {
		id, ok := DecodeLUN([8]byte(buf[8+8*i : 16+8*i]))
		if !ok || id != want {
			t.Fatalf("lun %d: %d %v", i, id, ok)
		}
	}
}

func TestUnmapWriteSame(t *testing.T) {
	tg, _ := newTarget(t, 1<<20)
	ones := bytes.Repeat([]byte{1}, 8192)
	tg.Execute(0, rw10(OpWrite10, 0, 16), ones)
	pl := make([]byte, 24)
	binary.BigEndian.PutUint16(pl[0:], 22)
	binary.BigEndian.PutUint16(pl[2:], 16)
	binary.BigEndian.PutUint64(pl[8:], 2)
	binary.BigEndian.PutUint32(pl[16:], 3)
	c := make([]byte, 10)
	c[0], c[8] = OpUnmap, 24
	if r := tg.Execute(0, c, pl); r.Status != StatusGood {
		t.Fatalf("unmap %+v", r)
	}
	got := make([]byte, 8192)
	tg.Execute(0, rw10(OpRead10, 0, 16), got)
	for i := range 16 {
		want := byte(1)
		if i >= 2 && i < 5 {
			want = 0
		}
		if got[i*512] != want || got[i*512+511] != want {
			t.Fatalf("block %d = %d, want %d", i, got[i*512], want)
		}
	}
	ws := rw16(OpWriteSame16, 10, 4)
	if r := tg.Execute(0, ws, bytes.Repeat([]byte{7}, 512)); r.Status != StatusGood {
		t.Fatalf("write same %+v", r)
	}
	tg.Execute(0, rw10(OpRead10, 0, 16), got)
	if got[10*512] != 7 || got[14*512-1] != 7 || got[14*512] != 1 {
		t.Fatal("write same did not write blocks 10..13")
	}
	ws[1] |= 0x08
	if r := tg.Execute(0, ws, make([]byte, 512)); r.Status != StatusGood {
		t.Fatalf("write same unmap %+v", r)
	}
	tg.Execute(0, rw10(OpRead10, 0, 16), got)
	if got[10*512] != 0 {
		t.Fatal("write same unmap left data")
	}
	binary.BigEndian.PutUint64(pl[8:], 4000)
	wantCheck(t, tg.Execute(0, c, pl), SenseLBAOutOfRange)
	binary.BigEndian.PutUint16(pl[2:], 17)
	wantCheck(t, tg.Execute(0, c, pl), SenseParamListLength)
}

func TestFileBackend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lun0")
	b, err := OpenFile(path, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("O_DIRECT: %v", b.Direct())
	tg := NewTarget()
	if _, err := tg.AddLUN(0, b, LUNConfig{}); err != nil {
		t.Fatal(err)
	}
	al := AlignedBuf(4096)
	for i := range al {
		al[i] = byte(i * 7)
	}
	un := make([]byte, 4097)[1:] // unaligned: the buffered path
	copy(un, al)
	for _, buf := range [][]byte{al, un} {
		if r := tg.Execute(0, rw10(OpWrite10, 3, 8), buf); r.Status != StatusGood {
			t.Fatalf("write %+v", r)
		}
		got := AlignedBuf(4096)
		if r := tg.Execute(0, rw10(OpRead10, 3, 8), got); r.Status != StatusGood || !bytes.Equal(got, al) {
			t.Fatalf("read %+v", r)
		}
	}
	if r := tg.Execute(0, []byte{OpSyncCache10, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil); r.Status != StatusGood {
		t.Fatal(r)
	}
	tg.Close()
	raw, _ := os.ReadFile(path)
	if !bytes.Equal(raw[3*512:3*512+4096], al) || len(raw) != 1<<20 {
		t.Fatal("file content differs")
	}
	if _, err := OpenFile(filepath.Join(t.TempDir(), "none"), 0, false); err == nil {
		t.Fatal("opened a missing file without size")
	}
}

func TestTaskManagement(t *testing.T) {
	tg, _ := newTarget(t, 4096)
	nexus := new(int)
	task, ok := tg.Begin(nexus, 0, 1)
	if !ok {
		t.Fatal("begin")
	}
	if _, ok := tg.Begin(nexus, 0, 1); ok {
		t.Fatal("overlapped tag accepted")
	}
	if r, _ := tg.AbortTask(nexus, 0, 2); r != TMFTaskNotFound {
		t.Fatal(r)
	}
	r, done := tg.AbortTask(nexus, 0, 1)
	if r != TMFComplete || !task.Aborted() {
		t.Fatal(r)
	}
	select {
	case <-done:
		t.Fatal("abort done before the task ended")
	default:
	}
	tg.End(task)
	<-done
	t2, _ := tg.Begin(nexus, 0, 3)
	r, done = tg.ResetLUN(0)
	tg.End(t2)
	<-done
	if r != TMFComplete || !t2.Aborted() {
		t.Fatal(r)
	}
	if r, _ := tg.ResetLUN(9); r != TMFLUNNotFound {
		t.Fatal(r)
	}
}

func TestLUNEncoding(t *testing.T) {
	for _, id := range []uint64{0, 1, 255, 256, 16383} {
		if got, ok := DecodeLUN(EncodeLUN(id)); !ok || got != id {
			t.Fatalf("%d -> %d %v", id, got, ok)
		}
	}
	if _, ok := DecodeLUN([8]byte{0, 1, 0, 1}); ok {
		t.Fatal("two-level LUN decoded")
	}
}

// FuzzExecute feeds arbitrary CDBs and data to every LUN path: nothing
// may panic, and a command's data-in never exceeds its buffer.
func FuzzExecute(f *testing.F) {
	f.Add(rw10(OpRead10, 0, 1), uint16(512))
	f.Add(rw16(OpWrite16, 1, 2), uint16(1024))
	f.Add([]byte{OpInquiry, 1, 0x83, 0, 255, 0}, uint16(255))
	f.Add([]byte{OpModeSense10, 0, 0x3f, 0xff, 0, 0, 0, 0, 200, 0}, uint16(200))
	f.Add([]byte{OpUnmap, 0, 0, 0, 0, 0, 0, 0, 24, 0}, uint16(24))
	f.Add(rw16(OpWriteSame16, 0, 8), uint16(512))
	f.Add([]byte{OpServiceActionIn, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, uint16(32))
	f.Add([]byte{OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0}, uint16(64))
	f.Fuzz(func(t *testing.T, cdb []byte, n uint16) {
		tg, _ := newTarget(t, 16<<10)
		buf := make([]byte, int(n)%8192)
		for i := range buf {
			buf[i] = byte(i)
		}
		r := tg.Execute(0, cdb, buf)
		if r.DataIn > len(buf) || r.DataIn < 0 {
			t.Fatalf("data-in %d > buffer %d", r.DataIn, len(buf))
		}
		if r.Status == StatusCheckCondition && r.Sense.Key == 0 {
			t.Fatal("CHECK CONDITION without a sense key")
		}
	})
}

// FuzzParseSense checks the sense parser against arbitrary bytes and the
// builder's round trip.
func FuzzParseSense(f *testing.F) {
	var b [FixedSenseLen]byte
	f.Add(SenseLBAOutOfRange.PutFixed(b[:]))
	f.Add([]byte{0x72, 5, 0x24, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		s, ok := ParseFixed(p)
		if !ok {
			return
		}
		var o [FixedSenseLen]byte
		if s2, _ := ParseFixed(s.PutFixed(o[:])); s2 != s {
			t.Fatalf("round trip %+v %+v", s, s2)
		}
	})
}

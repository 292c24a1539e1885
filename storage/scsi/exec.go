package scsi

import (
	"encoding/binary"
)

// Execute runs one command on logical unit lun. buf is the command's data
// buffer, sized to the transport's expected transfer length: for a
// command that carries data-out (WRITE, UNMAP, WRITE SAME, MODE SELECT)
// it holds that data; otherwise Execute fills it with up to len(buf)
// bytes of data-in and reports how many in Result.DataIn (the transport
// computes residuals from that). Execute never panics on a bad CDB: it
// returns CHECK CONDITION with sense data.
func (t *Target) Execute(lun uint64, cdb []byte, buf []byte) Result {
	t.Stats.Commands.Add(1)
	r := t.execute(lun, CDB(cdb), buf)
	if r.Status == StatusCheckCondition {
		t.Stats.CheckConditions.Add(1)
	}
	return r
}

func (t *Target) execute(lun uint64, c CDB, buf []byte) Result {
	if c.Check() != nil {
		if len(c) > 0 && c.Len() == 0 {
			return check(SenseInvalidOpcode)
		}
		return check(SenseInvalidFieldCDB)
	}
	l := t.LUN(lun)
	switch c.Op() {
	case OpReportLUNs:
		return t.reportLUNs(c, buf)
	case OpInquiry:
		if l == nil {
			return t.inquiryNoLUN(c, buf)
		}
		return l.inquiry(c, buf)
	case OpRequestSense:
		// Sense is returned with each CHECK CONDITION (autosense), so
		// nothing is pending here.
		var s [FixedSenseLen]byte
		Sense{}.PutFixed(s[:])
		return Result{DataIn: copy(buf[:min(len(buf), int(c.AllocLen()))], s[:])}
	}
	if l == nil {
		return check(SenseLUNNotSupported)
	}
	switch c.Op() {
	case OpTestUnitReady, OpStartStop, OpPreventAllow:
		return Result{}
	case OpRead6, OpRead10, OpRead16:
		return l.read(t, c, buf)
	case OpWrite6, OpWrite10, OpWrite16:
		return l.write(t, c, buf)
	case OpVerify10:
		// BYTCHK 0: the medium is verified by reading it, which never
		// fails here beyond the range check.
		if c[1]&0x06 != 0 {
			return check(SenseInvalidFieldCDB)
		}
		if !l.inRange(c.LBA(), uint64(c.Blocks())) {
			return check(SenseLBAOutOfRange)
		}
		return Result{}
	case OpSyncCache10, OpSyncCache16:
		if err := l.b.Sync(); err != nil {
			return check(SenseWriteError)
		}
		return Result{}
	case OpReadCapacity10:
		return l.readCapacity10(buf)
	case OpServiceActionIn:
		if c.ServiceAction() != saReadCapacity16 {
			return check(SenseInvalidFieldCDB)
		}
		return l.readCapacity16(c, buf)
	case OpModeSense6, OpModeSense10:
		return l.modeSense(c, buf)
	case OpUnmap:
		return l.unmap(c, buf)
	case OpWriteSame16:
		return l.writeSame16(c, buf)
	}
	return check(SenseInvalidOpcode)
}

func (l *LUN) inRange(lba, n uint64) bool {
	return lba <= l.blocks && n <= l.blocks-lba
}

func (l *LUN) rw(c CDB, buf []byte) (off int64, n int, r Result, ok bool) {
	lba, blocks := c.LBA(), uint64(c.Blocks())
	if !l.inRange(lba, blocks) {
		return 0, 0, check(SenseLBAOutOfRange), false
	}
	if l.maxXfer != 0 && blocks > uint64(l.maxXfer) {
		return 0, 0, check(SenseInvalidFieldCDB), false
	}
	n64 := blocks * uint64(l.bs)
	if n64 > uint64(len(buf)) {
		// The initiator's buffer is smaller than the command says
		// (an overflow the transport could not express).
		return 0, 0, check(SenseInvalidFieldCDB), false
	}
	return int64(lba) * int64(l.bs), int(n64), Result{}, true
}

func (l *LUN) read(t *Target, c CDB, buf []byte) Result {
	off, n, r, ok := l.rw(c, buf)
	if !ok {
		return r
	}
	if n > 0 {
		if _, err := l.b.ReadAt(buf[:n], off); err != nil {
			return check(SenseReadError)
		}
	}
	t.Stats.Reads.Add(1)
	t.Stats.BytesRead.Add(uint64(n))
	return Result{DataIn: n}
}

func (l *LUN) write(t *Target, c CDB, buf []byte) Result {
	if l.ro {
		return check(SenseWriteProtected)
	}
	off, n, r, ok := l.rw(c, buf)
	if !ok {
		return r
	}
	if n > 0 {
		if _, err := l.b.WriteAt(buf[:n], off); err != nil {
			return check(SenseWriteError)
		}
		if c.FUA() {
			if err := l.b.Sync(); err != nil {
				return check(SenseWriteError)
			}
		}
	}
	t.Stats.Writes.Add(1)
	t.Stats.BytesWritten.Add(uint64(n))
	return Result{}
}

func (l *LUN) readCapacity10(buf []byte) Result {
	var d [8]byte
	last := l.blocks - 1
	if last > 0xffffffff {
		last = 0xffffffff // the initiator must use READ CAPACITY(16)
	}
	binary.BigEndian.PutUint32(d[0:], uint32(last))
	binary.BigEndian.PutUint32(d[4:], l.bs)
	return Result{DataIn: copy(buf, d[:])}
}

func (l *LUN) readCapacity16(c CDB, buf []byte) Result {
	var d [32]byte
	binary.BigEndian.PutUint64(d[0:], l.blocks-1)
	binary.BigEndian.PutUint32(d[8:], l.bs)
	// LBPME: UNMAP and WRITE SAME(16) with UNMAP deallocate; LBPRZ:
	// deallocated blocks read as zeros.
	d[14] = 0xc0
	return Result{DataIn: copy(buf[:min(len(buf), int(c.AllocLen()))], d[:])}
}

func (t *Target) reportLUNs(c CDB, buf []byte) Result {
	if c.AllocLen() < 16 {
		return check(SenseInvalidFieldCDB) // SPC-4: at least 16
	}
	if c[2] > 2 && c[2] != 0x10 && c[2] != 0x11 && c[2] != 0x12 {
		return check(SenseInvalidFieldCDB)
	}
	t.mu.RLock()
	ids := t.ids
	t.mu.RUnlock()
	lim := buf[:min(len(buf), int(c.AllocLen()))]
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(8*len(ids)))
	n := copy(lim, hdr[:])
	for _, id := range ids {
		e := EncodeLUN(id)
		n += copy(lim[n:], e[:])
	}
	return Result{DataIn: n}
}

// unmap deallocates the block descriptors of an UNMAP parameter list
// (SBC-3 §5.28).
func (l *LUN) unmap(c CDB, buf []byte) Result {
	if l.ro {
		return check(SenseWriteProtected)
	}
	pl := buf[:min(len(buf), int(c.ParamListLen()))]
	if len(pl) == 0 {
		return Result{}
	}
	if len(pl) < 8 {
		return check(SenseParamListLength)
	}
	dl := int(binary.BigEndian.Uint16(pl[2:4]))
	if dl%16 != 0 || 8+dl > len(pl) {
		return check(SenseParamListLength)
	}
	if dl/16 > maxUnmapDescriptors {
		return check(SenseInvalidFieldPL)
	}
	for d := pl[8 : 8+dl]; len(d) >= 16; d = d[16:] {
		lba, n := binary.BigEndian.Uint64(d[0:8]), uint64(binary.BigEndian.Uint32(d[8:12]))
		if !l.inRange(lba, n) {
			return check(SenseLBAOutOfRange)
		}
		if n > maxUnmapBlocks {
			return check(SenseInvalidFieldPL)
		}
	}
	for d := pl[8 : 8+dl]; len(d) >= 16; d = d[16:] {
		lba, n := binary.BigEndian.Uint64(d[0:8]), uint64(binary.BigEndian.Uint32(d[8:12]))
		if n == 0 {
			continue
		}
		if err := l.b.Discard(int64(lba)*int64(l.bs), int64(n)*int64(l.bs)); err != nil {
			return check(SenseWriteError)
		}
	}
	return Result{}
}

// Unmap limits advertised in VPD 0xB0.
const (
	maxUnmapBlocks      = 1 << 22
	maxUnmapDescriptors = 16
)

// writeSame16 writes one block of data-out to every block of the range,
// or deallocates the range with the UNMAP bit (when the block is zeros,
// as LBPRZ promises they read back).
func (l *LUN) writeSame16(c CDB, buf []byte) Result {
	if l.ro {
		return check(SenseWriteProtected)
	}
	lba, n := c.LBA(), uint64(c.Blocks())
	if n == 0 {
		return check(SenseInvalidFieldCDB) // WSNZ: zero means the whole medium, which we refuse
	}
	if !l.inRange(lba, n) {
		return check(SenseLBAOutOfRange)
	}
	if n > maxUnmapBlocks {
		return check(SenseInvalidFieldCDB)
	}
	var block []byte
	if !c.NDOB() {
		if len(buf) < int(l.bs) {
			return check(SenseInvalidFieldCDB)
		}
		block = buf[:l.bs]
	}
	zero := true
	for _, b := range block {
		if b != 0 {
			zero = false
			break
		}
	}
	if c.Unmap() && zero {
		if err := l.b.Discard(int64(lba)*int64(l.bs), int64(n)*int64(l.bs)); err != nil {
			return check(SenseWriteError)
		}
		return Result{}
	}
	if block == nil {
		block = make([]byte, l.bs)
	}
	chunk := make([]byte, 0, 1<<20)
	for len(chunk)+len(block) <= cap(chunk) {
		chunk = append(chunk, block...)
	}
	off, end := int64(lba)*int64(l.bs), int64(lba+n)*int64(l.bs)
	for off < end {
		k := min(end-off, int64(len(chunk)))
		if _, err := l.b.WriteAt(chunk[:k], off); err != nil {
			return check(SenseWriteError)
		}
		off += k
	}
	return Result{}
}

package scsi

import (
	"encoding/binary"
)

// Identification strings of the standard INQUIRY data.
const (
	vendorID  = "SOFTIB  "         // 8 bytes
	productID = "softib block dev" // 16 bytes
	revision  = "0001"             // 4 bytes
)

// vpdPages lists the VPD pages in the order VPD 0x00 reports them.
var vpdPages = []byte{0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2}

func (t *Target) inquiryNoLUN(c CDB, buf []byte) Result {
	if c.EVPD() || c.PageCode() != 0 {
		return check(SenseLUNNotSupported)
	}
	var d [36]byte
	d[0] = 0x7f // peripheral qualifier 3: no logical unit here
	d[2], d[3], d[4] = 0x06, 0x02, byte(len(d)-5)
	return Result{DataIn: copy(buf[:min(len(buf), int(c.AllocLen()))], d[:])}
}

func (l *LUN) inquiry(c CDB, buf []byte) Result {
	lim := buf[:min(len(buf), int(c.AllocLen()))]
	if !c.EVPD() {
		if c.PageCode() != 0 {
			return check(SenseInvalidFieldCDB)
		}
		var d [66]byte
		d[0] = 0x00 // direct access block device
		d[2] = 0x06 // SPC-4
		d[3] = 0x12 // HISUP, response data format 2
		d[4] = byte(len(d) - 5)
		d[7] = 0x02 // CMDQUE
		copy(d[8:16], vendorID)
		copy(d[16:32], productID)
		copy(d[32:36], revision)
		// Version descriptors: SAM-5, SPC-4, SBC-3.
		binary.BigEndian.PutUint16(d[58:], 0x00a0)
		binary.BigEndian.PutUint16(d[60:], 0x0460)
		binary.BigEndian.PutUint16(d[62:], 0x04c0)
		return Result{DataIn: copy(lim, d[:])}
	}
	var d [256]byte
	d[1] = c.PageCode()
	var n int // page length after the 4-byte header
	p := d[4:]
	switch c.PageCode() {
	case 0x00:
		n = copy(p, vpdPages)
	case 0x80:
		n = copy(p, l.serial)
	case 0x83:
		// NAA designator, binary, associated with the logical unit.
		p[0], p[1], p[3] = 0x01, 0x03, 16
		copy(p[4:20], l.naa[:])
		n = 20
		// T10 vendor ID designator, ASCII.
		q := p[n:]
		q[0], q[1] = 0x02, 0x01
		id := vendorID + l.serial
		q[3] = byte(copy(q[4:], id))
		n += 4 + int(q[3])
	case 0xb0:
		// Block limits (SBC-3 §6.5.3).
		n = 0x3c
		binary.BigEndian.PutUint16(p[2:], 0) // optimal transfer length granularity: none
		binary.BigEndian.PutUint32(p[4:], l.maxXfer)
		binary.BigEndian.PutUint32(p[8:], min(l.maxXfer, 128*1024/l.bs)) // optimal transfer length
		binary.BigEndian.PutUint32(p[16:], maxUnmapBlocks)
		binary.BigEndian.PutUint32(p[20:], maxUnmapDescriptors)
		binary.BigEndian.PutUint64(p[32:], maxUnmapBlocks) // maximum WRITE SAME length
	case 0xb1:
		// Block device characteristics: a non-rotating medium.
		n = 0x3c
		binary.BigEndian.PutUint16(p[0:], 1)
	case 0xb2:
		// Logical block provisioning: UNMAP and WRITE SAME(16) with
		// UNMAP deallocate, which reads back zeros (LBPRZ).
		n = 4
		p[1] = 0x80 | 0x40 | 0x04 // LBPU, LBPWS, LBPRZ
		p[2] = 0x02               // thin provisioned
	default:
		return check(SenseInvalidFieldCDB)
	}
	binary.BigEndian.PutUint16(d[2:], uint16(n))
	return Result{DataIn: copy(lim, d[:4+n])}
}

// modeSense returns the caching (0x08) and control (0x0A) mode pages, or
// all of them (0x3F), without block descriptors (SPC-4 §6.11/6.12).
func (l *LUN) modeSense(c CDB, buf []byte) Result {
	if c.SubpageCode() != 0 && c.SubpageCode() != 0xff {
		return check(SenseInvalidFieldCDB)
	}
	pc := c.PageControl()
	if pc == 3 {
		return check(Sense{KeyIllegalRequest, 0x39, 0x00}) // SAVING PARAMETERS NOT SUPPORTED
	}
	var pages [64]byte
	n := 0
	caching := func() {
		p := pages[n : n+20]
		p[0], p[1] = 0x08, 18
		if pc != 1 {
			p[2] = 0x04 // WCE: writes may sit in the host page cache until SYNCHRONIZE CACHE
		}
		n += 20
	}
	control := func() {
		p := pages[n : n+12]
		p[0], p[1] = 0x0a, 10
		if pc != 1 {
			p[3] = 0x10 // queue algorithm modifier 1: unrestricted reordering
			p[9], p[10] = 0xff, 0xff
		}
		n += 12
	}
	switch c.PageCode() {
	case 0x08:
		caching()
	case 0x0a:
		control()
	case 0x3f:
		caching()
		control()
	default:
		return check(SenseInvalidFieldCDB)
	}
	var dsp byte = 0x10 // DPOFUA
	if l.ro {
		dsp |= 0x80
	}
	var d [8 + 64]byte
	var hl int
	if c.Op() == OpModeSense6 {
		hl = 4
		d[0] = byte(hl - 1 + n)
		d[2] = dsp
	} else {
		hl = 8
		binary.BigEndian.PutUint16(d[0:], uint16(hl-2+n))
		d[3] = dsp
	}
	copy(d[hl:], pages[:n])
	return Result{DataIn: copy(buf[:min(len(buf), int(c.AllocLen()))], d[:hl+n])}
}

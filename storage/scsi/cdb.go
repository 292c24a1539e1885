package scsi

import (
	"encoding/binary"
	"errors"
)

// Operation codes the core implements (SPC-4 and SBC-3).
const (
	OpTestUnitReady   = 0x00
	OpRequestSense    = 0x03
	OpRead6           = 0x08
	OpWrite6          = 0x0a
	OpInquiry         = 0x12
	OpModeSelect6     = 0x15
	OpModeSense6      = 0x1a
	OpStartStop       = 0x1b
	OpPreventAllow    = 0x1e
	OpReadCapacity10  = 0x25
	OpRead10          = 0x28
	OpWrite10         = 0x2a
	OpVerify10        = 0x2f
	OpSyncCache10     = 0x35
	OpUnmap           = 0x42
	OpModeSense10     = 0x5a
	OpRead16          = 0x88
	OpWrite16         = 0x8a
	OpSyncCache16     = 0x91
	OpWriteSame16     = 0x93
	OpServiceActionIn = 0x9e // READ CAPACITY(16) is its service action 0x10
	OpReportLUNs      = 0xa0

	saReadCapacity16 = 0x10
)

// ErrShortCDB is returned for a CDB shorter than its operation code's
// group requires.
var ErrShortCDB = errors.New("scsi: CDB shorter than its operation code requires")

// CDB is a typed view of a command descriptor block. Its accessors read
// the fields of the CDB's group (SPC-4 §4.2.5: the operation code's top
// three bits give the length); call Check first.
type CDB []byte

// Len returns the length the operation code's group gives (6, 10, 12 or
// 16), or 0 for a vendor-specific or reserved group.
func (c CDB) Len() int {
	if len(c) == 0 {
		return 0
	}
	switch c[0] >> 5 {
	case 0:
		return 6
	case 1, 2:
		return 10
	case 4:
		return 16
	case 5:
		return 12
	}
	return 0
}

// Check reports whether the CDB holds at least its group's length.
func (c CDB) Check() error {
	n := c.Len()
	if n == 0 || len(c) < n {
		return ErrShortCDB
	}
	return nil
}

// Op is the operation code.
func (c CDB) Op() byte { return c[0] }

// LBA is the logical block address of a READ/WRITE/VERIFY/WRITE SAME CDB.
func (c CDB) LBA() uint64 {
	switch c.Len() {
	case 6:
		return uint64(binary.BigEndian.Uint32(c[0:4]) & 0x1fffff)
	case 10, 12:
		return uint64(binary.BigEndian.Uint32(c[2:6]))
	case 16:
		return binary.BigEndian.Uint64(c[2:10])
	}
	return 0
}

// Blocks is the transfer length in logical blocks of a READ/WRITE CDB (a
// READ(6)/WRITE(6) length of 0 means 256 blocks).
func (c CDB) Blocks() uint32 {
	switch c.Len() {
	case 6:
		if c[4] == 0 {
			return 256
		}
		return uint32(c[4])
	case 10:
		return uint32(binary.BigEndian.Uint16(c[7:9]))
	case 12:
		return binary.BigEndian.Uint32(c[6:10])
	case 16:
		return binary.BigEndian.Uint32(c[10:14])
	}
	return 0
}

// FUA reports the force-unit-access bit of a READ/WRITE(10/12/16) CDB.
func (c CDB) FUA() bool { return c.Len() > 6 && c[1]&0x08 != 0 }

// EVPD is INQUIRY's enable-vital-product-data bit.
func (c CDB) EVPD() bool { return c[1]&0x01 != 0 }

// PageCode is INQUIRY's VPD page code (with EVPD) or MODE SENSE's page
// code (low six bits of byte 2).
func (c CDB) PageCode() byte {
	if c[0] == OpInquiry {
		return c[2]
	}
	return c[2] & 0x3f
}

// PageControl is MODE SENSE's page control field (0 current, 1
// changeable, 2 default, 3 saved).
func (c CDB) PageControl() byte { return c[2] >> 6 }

// SubpageCode is MODE SENSE's subpage code.
func (c CDB) SubpageCode() byte { return c[3] }

// DBD is MODE SENSE's disable-block-descriptors bit.
func (c CDB) DBD() bool { return c[1]&0x08 != 0 }

// ServiceAction is the service action of a SERVICE ACTION IN(16) CDB.
func (c CDB) ServiceAction() byte { return c[1] & 0x1f }

// AllocLen is the allocation length of INQUIRY, MODE SENSE, REQUEST
// SENSE, REPORT LUNS and SERVICE ACTION IN(16).
func (c CDB) AllocLen() uint32 {
	switch c[0] {
	case OpInquiry:
		return uint32(binary.BigEndian.Uint16(c[3:5]))
	case OpModeSense6, OpRequestSense:
		return uint32(c[4])
	case OpModeSense10:
		return uint32(binary.BigEndian.Uint16(c[7:9]))
	case OpReportLUNs:
		return binary.BigEndian.Uint32(c[6:10])
	case OpServiceActionIn:
		return binary.BigEndian.Uint32(c[10:14])
	}
	return 0
}

// ParamListLen is the parameter list length of UNMAP.
func (c CDB) ParamListLen() uint32 { return uint32(binary.BigEndian.Uint16(c[7:9])) }

// Unmap is WRITE SAME(16)'s UNMAP bit.
func (c CDB) Unmap() bool { return c[1]&0x08 != 0 }

// NDOB is WRITE SAME(16)'s no-data-out-buffer bit.
func (c CDB) NDOB() bool { return c[1]&0x01 != 0 }

// Immed is SYNCHRONIZE CACHE's IMMED bit.
func (c CDB) Immed() bool { return c[1]&0x02 != 0 }

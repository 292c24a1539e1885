package scsi

// Status is a SCSI status code (SAM-5).
type Status byte

// Status codes.
const (
	StatusGood           Status = 0x00
	StatusCheckCondition Status = 0x02
	StatusBusy           Status = 0x08
	StatusTaskSetFull    Status = 0x28
	StatusTaskAborted    Status = 0x40
)

// Sense keys (SPC-4 §4.5.6).
const (
	KeyNoSense        = 0x0
	KeyNotReady       = 0x2
	KeyMediumError    = 0x3
	KeyHardwareError  = 0x4
	KeyIllegalRequest = 0x5
	KeyUnitAttention  = 0x6
	KeyDataProtect    = 0x7
	KeyAbortedCommand = 0xb
)

// Sense is the content of fixed-format sense data: key, additional sense
// code and qualifier.
type Sense struct {
	Key  byte
	ASC  byte
	ASCQ byte
}

// The sense the core reports.
var (
	SenseInvalidOpcode   = Sense{KeyIllegalRequest, 0x20, 0x00} // INVALID COMMAND OPERATION CODE
	SenseLBAOutOfRange   = Sense{KeyIllegalRequest, 0x21, 0x00} // LOGICAL BLOCK ADDRESS OUT OF RANGE
	SenseInvalidFieldCDB = Sense{KeyIllegalRequest, 0x24, 0x00} // INVALID FIELD IN CDB
	SenseInvalidFieldPL  = Sense{KeyIllegalRequest, 0x26, 0x00} // INVALID FIELD IN PARAMETER LIST
	SenseLUNNotSupported = Sense{KeyIllegalRequest, 0x25, 0x00} // LOGICAL UNIT NOT SUPPORTED
	SenseParamListLength = Sense{KeyIllegalRequest, 0x1a, 0x00} // PARAMETER LIST LENGTH ERROR
	SenseWriteProtected  = Sense{KeyDataProtect, 0x27, 0x00}    // WRITE PROTECTED
	SenseReadError       = Sense{KeyMediumError, 0x11, 0x00}    // UNRECOVERED READ ERROR
	SenseWriteError      = Sense{KeyMediumError, 0x0c, 0x00}    // WRITE ERROR
	SenseInternal        = Sense{KeyHardwareError, 0x44, 0x00}  // INTERNAL TARGET FAILURE
)

// FixedSenseLen is the length of the fixed-format sense data the core
// builds.
const FixedSenseLen = 18

// PutFixed writes s as fixed-format sense data (SPC-4 §4.5.3: response
// code 0x70, current error) into b, which must hold FixedSenseLen bytes,
// and returns the bytes written.
func (s Sense) PutFixed(b []byte) []byte {
	b = b[:FixedSenseLen]
	clear(b)
	b[0] = 0x70
	b[2] = s.Key & 0x0f
	b[7] = FixedSenseLen - 8
	b[12] = s.ASC
	b[13] = s.ASCQ
	return b
}

// ParseFixed reads the key, ASC and ASCQ of fixed- or descriptor-format
// sense data; ok is false when b is neither.
func ParseFixed(b []byte) (s Sense, ok bool) {
	if len(b) < 1 {
		return s, false
	}
	switch b[0] & 0x7f {
	case 0x70, 0x71:
		if len(b) < 14 {
			return s, false
		}
		return Sense{b[2] & 0x0f, b[12], b[13]}, true
	case 0x72, 0x73:
		if len(b) < 4 {
			return s, false
		}
		return Sense{b[1] & 0x0f, b[2], b[3]}, true
	}
	return s, false
}

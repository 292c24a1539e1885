package srp

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"softib/wire/mad"
)

// Device management (DM) MADs (IBTA Vol 1 §16.3; SRP-2 annex B.7), the
// queries srp_daemon and ibsrpdm send to find SRP targets: the common
// MAD header, 40 bytes the DM class leaves reserved (RMPP and DM
// headers, unused without RMPP), then 192 bytes of attribute data.
const (
	// DMClassVersion is the device management class version.
	DMClassVersion = 1
	// DMDataOffset is where the attribute data starts in a DM MAD
	// (IB_MGMT_DEVICE_HDR).
	DMDataOffset = 64
	// DMDataSize is the attribute data size (IB_MGMT_DEVICE_DATA).
	DMDataSize = mad.MADSize - DMDataOffset
)

// DM attribute IDs (IBTA Vol 1 §16.3.3, Table 279).
const (
	DMAttrClassPortInfo  mad.AttrID = 0x0001
	DMAttrIOUnitInfo     mad.AttrID = 0x0010
	DMAttrIOCProfile     mad.AttrID = 0x0011
	DMAttrServiceEntries mad.AttrID = 0x0012
)

// DM MAD status values: the common ones and the DM class's "no I/O
// controller" (IBTA Vol 1 §16.3.1.1), as Linux's ib_dm_mad.h names
// them.
const (
	DMStatusUnsupportedMethod            = mad.StatusUnsupportedMethod     // 0x0008
	DMStatusUnsupportedMethodAttr        = mad.StatusUnsupportedMethodAttr // 0x000C
	DMStatusInvalidField                 = mad.StatusInvalidField          // 0x001C
	DMStatusNoIOC                 uint16 = 0x0100
)

// IOUnitInfo controller slot states (4 bits per slot).
const (
	IOCNotInstalled = 0x0
	IOCPresent      = 0x1
	IOCNoSlot       = 0xf
)

// I/O controller profile values of an SRP target (SRP-2 annex B.7,
// Table B.7; Linux's ib_srpt.h and scsi/srp.h).
const (
	SRPIOClass         = 0x0100 // SRP_REV16A_IB_IO_CLASS
	SRPIOSubclass      = 0x609e
	SRPProtocol        = 0x0108
	SRPProtocolVersion = 0x0001
	// OpCap bits: SEND to/from the IOC, RDMA READ/WRITE from the IOC.
	OpCapSendToIOC    = 0x01
	OpCapSendFromIOC  = 0x02
	OpCapRDMAReadIOC  = 0x08
	OpCapRDMAWriteIOC = 0x20
	// ServiceNamePrefix starts an SRP service entry's name; the 16 hex
	// digits of id_ext follow (srp_daemon reads them back).
	ServiceNamePrefix = "SRP.T10:"
)

// Sizes of the DM attributes.
const (
	IOUnitInfoSize      = 132
	IOCProfileSize      = 128
	ServiceEntrySize    = 48
	ServiceEntriesCount = 4
)

// DMMAD is a typed view of a 256-byte device management MAD.
type DMMAD []byte

// ParseDMMAD checks that b is a whole MAD of the DM class, version 1.
func ParseDMMAD(b []byte) (DMMAD, error) {
	h, err := mad.ParseHeader(b)
	if err != nil {
		return nil, err
	}
	if h.MgmtClass() != mad.ClassDevMgt || h.ClassVersion() != DMClassVersion {
		return nil, fmt.Errorf("srp: DM MAD of class %v version %d: %w", h.MgmtClass(), h.ClassVersion(), ErrBadIU)
	}
	return DMMAD(b[:mad.MADSize:mad.MADSize]), nil
}

// Header returns the MAD common header.
func (m DMMAD) Header() mad.Header { return mad.Header(m[:mad.HeaderSize]) }

// Data returns the 192 bytes of attribute data.
func (m DMMAD) Data() []byte { return m[DMDataOffset:] }

// AppendDMGet appends a DM Get MAD for attr with modifier mod and
// transaction ID tid (the request srp_daemon sends).
func AppendDMGet(b []byte, tid uint64, attr mad.AttrID, mod uint32) []byte {
	h := mad.HeaderFields{BaseVersion: mad.BaseVersion, MgmtClass: mad.ClassDevMgt, ClassVersion: DMClassVersion,
		Method: mad.MethodGet, TID: tid, AttrID: attr, AttrMod: mod}
	b = h.Append(b)
	return append(b, make([]byte, mad.MADSize-mad.HeaderSize)...)
}

// ServiceEntriesMod is the attribute modifier of a ServiceEntries Get:
// the controller slot and the first and last entry wanted.
func ServiceEntriesMod(slot uint16, lo, hi uint8) uint32 {
	return uint32(slot)<<16 | uint32(hi)<<8 | uint32(lo)
}

// IOUnitInfo is a typed view of the IOUnitInfo attribute (IBTA Vol 1
// §16.3.3.3): change ID, max controllers, option ROM, and one 4-bit
// state per controller slot.
type IOUnitInfo []byte

// ParseIOUnitInfo checks the length.
func ParseIOUnitInfo(b []byte) (IOUnitInfo, error) {
	if len(b) < IOUnitInfoSize {
		return nil, ErrShortIU
	}
	return IOUnitInfo(b[:IOUnitInfoSize]), nil
}

// ChangeID is the change ID.
func (u IOUnitInfo) ChangeID() uint16 { return binary.BigEndian.Uint16(u[0:2]) }

// MaxControllers is the number of controller slots.
func (u IOUnitInfo) MaxControllers() int { return int(u[2]) }

// Controller returns the state of 1-based slot (0 outside 1..255).
func (u IOUnitInfo) Controller(slot int) byte {
	if slot < 1 || slot > 256 {
		return 0
	}
	b := u[4+(slot-1)/2]
	if slot%2 == 1 {
		return b >> 4
	}
	return b & 0xf
}

// PutIOUnitInfo writes an IOUnitInfo with slots controller states
// (slot 1 first) into b.
func PutIOUnitInfo(b []byte, changeID uint16, slots []byte) IOUnitInfo {
	u := IOUnitInfo(b[:IOUnitInfoSize])
	clear(u)
	binary.BigEndian.PutUint16(u[0:], changeID)
	u[2] = byte(len(slots))
	for i, s := range slots {
		if i%2 == 0 {
			u[4+i/2] |= s << 4
		} else {
			u[4+i/2] |= s & 0xf
		}
	}
	return u
}

// IOCProfile is a typed view of the IOControllerProfile attribute
// (IBTA Vol 1 §16.3.3.4; SRP-2 Table B.7).
type IOCProfile []byte

// ParseIOCProfile checks the length.
func ParseIOCProfile(b []byte) (IOCProfile, error) {
	if len(b) < IOCProfileSize {
		return nil, ErrShortIU
	}
	return IOCProfile(b[:IOCProfileSize]), nil
}

// GUID is the I/O controller GUID (ioc_guid).
func (p IOCProfile) GUID() uint64 { return binary.BigEndian.Uint64(p[0:8]) }

// VendorID is the 24-bit IEEE vendor ID.
func (p IOCProfile) VendorID() uint32 { return binary.BigEndian.Uint32(p[8:12]) >> 8 }

// DeviceID is the device ID.
func (p IOCProfile) DeviceID() uint32 { return binary.BigEndian.Uint32(p[12:16]) }

// IOClass, IOSubclass, Protocol and ProtocolVersion say what the
// controller speaks (SRP: 0x0100, 0x609e, 0x0108, 1).
func (p IOCProfile) IOClass() uint16 { return binary.BigEndian.Uint16(p[28:30]) }

// IOSubclass is the I/O subclass.
func (p IOCProfile) IOSubclass() uint16 { return binary.BigEndian.Uint16(p[30:32]) }

// Protocol is the protocol.
func (p IOCProfile) Protocol() uint16 { return binary.BigEndian.Uint16(p[32:34]) }

// ProtocolVersion is the protocol version.
func (p IOCProfile) ProtocolVersion() uint16 { return binary.BigEndian.Uint16(p[34:36]) }

// SendQueueDepth is the number of SENDs the controller takes at once.
func (p IOCProfile) SendQueueDepth() uint16 { return binary.BigEndian.Uint16(p[40:42]) }

// RDMAReadDepth is the RDMA READs the controller has outstanding.
func (p IOCProfile) RDMAReadDepth() uint8 { return p[43] }

// SendSize is the largest SEND (IU) the controller takes.
func (p IOCProfile) SendSize() uint32 { return binary.BigEndian.Uint32(p[44:48]) }

// RDMASize is the largest RDMA transfer.
func (p IOCProfile) RDMASize() uint32 { return binary.BigEndian.Uint32(p[48:52]) }

// OpCapMask is the operation capability mask.
func (p IOCProfile) OpCapMask() uint8 { return p[52] }

// ServiceEntries is the number of service entries.
func (p IOCProfile) ServiceEntries() int { return int(p[54]) }

// IDString is the controller's name.
func (p IOCProfile) IDString() string { return cstring(p[64:128]) }

// IOCProfileFields are the IOControllerProfile values a target
// reports.
type IOCProfileFields struct {
	GUID                      uint64
	VendorID, DeviceID        uint32
	DeviceVersion             uint16
	SendQueueDepth            uint16
	RDMAReadDepth             uint8
	SendSize, RDMASize        uint32
	OpCapMask                 uint8
	ServiceEntries            uint8
	IDString                  string
	IOClass, IOSubclass       uint16
	Protocol, ProtocolVersion uint16
}

// PutIOCProfile writes f into b.
func PutIOCProfile(b []byte, f *IOCProfileFields) IOCProfile {
	p := IOCProfile(b[:IOCProfileSize])
	clear(p)
	binary.BigEndian.PutUint64(p[0:], f.GUID)
	binary.BigEndian.PutUint32(p[8:], f.VendorID<<8)
	binary.BigEndian.PutUint32(p[12:], f.DeviceID)
	binary.BigEndian.PutUint16(p[16:], f.DeviceVersion)
	binary.BigEndian.PutUint32(p[20:], f.VendorID<<8) // subsystem vendor
	binary.BigEndian.PutUint16(p[28:], f.IOClass)
	binary.BigEndian.PutUint16(p[30:], f.IOSubclass)
	binary.BigEndian.PutUint16(p[32:], f.Protocol)
	binary.BigEndian.PutUint16(p[34:], f.ProtocolVersion)
	binary.BigEndian.PutUint16(p[40:], f.SendQueueDepth)
	p[43] = f.RDMAReadDepth
	binary.BigEndian.PutUint32(p[44:], f.SendSize)
	binary.BigEndian.PutUint32(p[48:], f.RDMASize)
	p[52] = f.OpCapMask
	p[54] = f.ServiceEntries
	copy(p[64:127], f.IDString) // NUL-terminated
	return p
}

// ServiceEntries is a typed view of the ServiceEntries attribute (IBTA
// Vol 1 §16.3.3.5): up to four entries of a 40-byte name and a 64-bit
// service ID.
type ServiceEntries []byte

// ParseServiceEntries checks the length.
func ParseServiceEntries(b []byte) (ServiceEntries, error) {
	if len(b) < ServiceEntriesCount*ServiceEntrySize {
		return nil, ErrShortIU
	}
	return ServiceEntries(b[:ServiceEntriesCount*ServiceEntrySize]), nil
}

// Entry returns entry i's name and service ID.
func (s ServiceEntries) Entry(i int) (name string, id uint64) {
	e := s[i*ServiceEntrySize : (i+1)*ServiceEntrySize]
	return cstring(e[:40]), binary.BigEndian.Uint64(e[40:48])
}

// PutServiceEntry writes entry i.
func (s ServiceEntries) PutServiceEntry(i int, name string, id uint64) {
	e := s[i*ServiceEntrySize : (i+1)*ServiceEntrySize]
	clear(e)
	copy(e[:39], name)
	binary.BigEndian.PutUint64(e[40:], id)
}

// SRPServiceName is the service entry name of an SRP target port with
// identifier extension idExt.
func SRPServiceName(idExt uint64) string { return fmt.Sprintf("%s%016x", ServiceNamePrefix, idExt) }

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

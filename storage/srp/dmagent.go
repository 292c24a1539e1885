package srp

import (
	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// The DM agent: the target's I/O unit as srp_daemon and ibsrpdm see it,
// answered on the device's GSI QP the way Linux's ib_srpt answers
// (srpt_mgmt_method_get): one I/O controller in slot 1 of 16, its
// profile, and one service entry "SRP.T10:<id_ext>" whose ID is the
// IB CM service ID. Set gets status "unsupported method/attribute",
// as do unknown attributes; a slot outside 1..16 is an invalid field,
// an empty slot (or entries beyond the one) "no IOC".

// dmInfo is what the agent reports.
type dmInfo struct {
	ioc       IOCProfileFields
	idExt     uint64
	serviceID uint64
}

// dmInfo describes the target on a device with attributes attr.
func (t *Target) dmInfo(attr verbs.DeviceAttr) dmInfo {
	return dmInfo{
		ioc: IOCProfileFields{
			GUID: t.cfg.IOCGUID, VendorID: attr.VendorID & 0xFFFFFF, DeviceID: attr.VendorPartID,
			DeviceVersion: uint16(attr.HWVer), SendQueueDepth: uint16(t.cfg.Credits), RDMAReadDepth: 4,
			SendSize: maxITIU, RDMASize: maxXfer, ServiceEntries: 1, IDString: "softib SRP target",
			OpCapMask: OpCapSendToIOC | OpCapSendFromIOC | OpCapRDMAReadIOC | OpCapRDMAWriteIOC,
			IOClass:   SRPIOClass, IOSubclass: SRPIOSubclass, Protocol: SRPProtocol, ProtocolVersion: SRPProtocolVersion,
		},
		idExt:     t.cfg.IDExt,
		serviceID: t.ServiceID(),
	}
}

// registerDM installs the DM agent on g (a later target on the same
// device replaces it).
func (t *Target) registerDM(g *cm.GSI) {
	info := t.dmInfo(g.Device().Query())
	g.Register(mad.ClassDevMgt, DMClassVersion, []mad.Method{mad.MethodGet, mad.MethodSet}, func(m []byte, from cm.Addr) {
		req, err := ParseDMMAD(m)
		if err != nil {
			return // the GSI checked class and version; this cannot happen
		}
		var resp [mad.MADSize]byte
		if st := dmAnswer(req, resp[:], &info); st != 0 {
			t.Stats.DMErrors.Add(1)
		}
		t.Stats.DMGets.Add(1)
		if err := g.Send(resp[:], from); err != nil {
			t.cfg.Logf("srp: DM answer to %v: %v", from.GID().Addr(), err)
		}
	})
	t.mu.Lock()
	t.dms = append(t.dms, g)
	t.mu.Unlock()
}

// dmAnswer writes the GetResp to req into resp (mad.MADSize bytes) and
// returns its status.
func dmAnswer(req DMMAD, resp []byte, info *dmInfo) uint16 {
	r := DMMAD(resp[:mad.MADSize])
	copy(r[:DMDataOffset], req[:DMDataOffset])
	clear(r.Data())
	h := r.Header()
	h.SetMethod(mad.MethodGetResp)
	st := dmGet(req, r.Data(), info)
	if m := req.Header().Method(); m == mad.MethodSet {
		st = DMStatusUnsupportedMethodAttr
	} else if m != mad.MethodGet {
		st = DMStatusUnsupportedMethod
	}
	if st != 0 {
		clear(r.Data())
	}
	h.SetStatus(st)
	return st
}

// dmGet fills data with the attribute req asks for.
func dmGet(req DMMAD, data []byte, info *dmInfo) uint16 {
	mod := req.Header().AttrMod()
	switch req.Header().AttrID() {
	case DMAttrClassPortInfo:
		// Base and class version 1, response time value 20 (4.3 s) in
		// the low five bits of the third word, as ib_srpt reports.
		data[0], data[1] = mad.BaseVersion, DMClassVersion
		data[7] = 20
	case DMAttrIOUnitInfo:
		slots := make([]byte, 16)
		slots[0] = IOCPresent
		PutIOUnitInfo(data, 1, slots)
	case DMAttrIOCProfile:
		if mod == 0 || mod > 16 {
			return DMStatusInvalidField
		}
		if mod != 1 {
			return DMStatusNoIOC
		}
		PutIOCProfile(data, &info.ioc)
	case DMAttrServiceEntries:
		slot, hi, lo := mod>>16, uint8(mod>>8), uint8(mod)
		if slot == 0 || slot > 16 {
			return DMStatusInvalidField
		}
		if slot != 1 || lo > hi || hi > 0 {
			return DMStatusNoIOC
		}
		ServiceEntries(data[:ServiceEntriesCount*ServiceEntrySize]).PutServiceEntry(0, SRPServiceName(info.idExt), info.serviceID)
	default:
		return DMStatusUnsupportedMethodAttr
	}
	return 0
}

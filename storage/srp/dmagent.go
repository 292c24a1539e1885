package srp

import (
	"fmt"
	"slices"
	"sync"

	"softib/cm"
	"softib/verbs"
	"softib/wire/mad"
)

// The DM agent: the I/O unit of a device as srp_daemon and ibsrpdm see
// it, answered on the device's GSI QP the way Linux's ib_srpt answers
// (srpt_mgmt_method_get). Every target listening on a device's IB CM is
// one I/O controller of that device's I/O unit, in its own slot (1 to
// 16, in the order they registered; ib_srpt has one target per device,
// in slot 1): IOUnitInfo lists the occupied slots, each slot's
// IOControllerProfile is its target's, and its ServiceEntries the one
// entry "SRP.T10:<id_ext>" whose ID is the target's IB CM service ID.
// The targets of a device share one agent (a MAD class has one agent per
// GSI); the I/O unit's change ID counts the controllers that came and
// went (IBA 16.3.3.3). A 17th target on a device is refused. Set gets
// status "unsupported method/attribute", as do unknown attributes; a
// slot outside 1..16 is an invalid field, an empty slot (or entries
// beyond the one) "no IOC".

// dmInfo is what the agent reports for one target.
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

// dmSlots is the number of I/O controller slots the agent reports.
const dmSlots = 16

// dmUnit is a snapshot of one device's I/O unit: what one answer reads.
type dmUnit struct {
	changeID uint16
	slots    [dmSlots]*dmInfo // nil: empty slot
}

// dmAgent is the DM agent of one GSI and the targets it reports.
type dmAgent struct {
	g       *cm.GSI
	mu      sync.Mutex
	unit    *dmUnit // replaced, never changed, when targets come and go
	targets [dmSlots]*Target
}

// dmAgents holds the agent of every GSI some target registered on.
var dmAgents = struct {
	sync.Mutex
	m map[*cm.GSI]*dmAgent
}{m: make(map[*cm.GSI]*dmAgent)}

// registerDM adds the target to the DM agent of g's device, installing
// the agent with the device's first target.
func (t *Target) registerDM(g *cm.GSI) error {
	dmAgents.Lock()
	defer dmAgents.Unlock()
	a := dmAgents.m[g]
	if a == nil {
		a = &dmAgent{g: g, unit: &dmUnit{}}
	}
	a.mu.Lock()
	slot := -1
	for i, x := range a.targets {
		if x == t {
			a.mu.Unlock()
			return fmt.Errorf("srp: target %#x is already in the I/O unit of %s", t.cfg.IOCGUID, g.Device().Name())
		}
		if x == nil && slot < 0 {
			slot = i
		}
	}
	if slot < 0 {
		a.mu.Unlock()
		return fmt.Errorf("srp: device %s has %d SRP targets, the most one DM I/O unit reports", g.Device().Name(), dmSlots)
	}
	a.targets[slot] = t
	info := t.dmInfo(g.Device().Query())
	u := *a.unit
	u.changeID++
	u.slots[slot] = &info
	a.unit = &u
	a.mu.Unlock()
	if dmAgents.m[g] == nil {
		dmAgents.m[g] = a
		g.Register(mad.ClassDevMgt, DMClassVersion, []mad.Method{mad.MethodGet, mad.MethodSet}, a.handle)
	}
	t.mu.Lock()
	t.dms = append(t.dms, g)
	t.mu.Unlock()
	return nil
}

// unregisterDM takes the target out of g's I/O unit; the agent goes with
// the device's last target.
func (t *Target) unregisterDM(g *cm.GSI) {
	dmAgents.Lock()
	defer dmAgents.Unlock()
	a := dmAgents.m[g]
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	empty := true
	for i, x := range a.targets {
		if x == t {
			a.targets[i] = nil
			u := *a.unit
			u.changeID++
			u.slots[i] = nil
			a.unit = &u
		} else if x != nil {
			empty = false
		}
	}
	if empty {
		g.Unregister(mad.ClassDevMgt, DMClassVersion)
		delete(dmAgents.m, g)
	}
	t.mu.Lock()
	t.dms = slices.DeleteFunc(t.dms, func(x *cm.GSI) bool { return x == g })
	t.mu.Unlock()
}

// handle answers one DM MAD and counts it for the targets it concerns:
// the slot's for IOCProfile and ServiceEntries, every target's for the
// unit-wide attributes.
func (a *dmAgent) handle(m []byte, from cm.Addr) {
	req, err := ParseDMMAD(m)
	if err != nil {
		return // the GSI checked class and version; this cannot happen
	}
	a.mu.Lock()
	u, targets := a.unit, a.targets
	a.mu.Unlock()
	var resp [mad.MADSize]byte
	st := dmAnswer(req, resp[:], u)
	count := func(t *Target) {
		if t == nil {
			return
		}
		if st != 0 {
			t.Stats.DMErrors.Add(1)
		}
		t.Stats.DMGets.Add(1)
	}
	switch slot := dmSlot(req); {
	case slot >= 1 && slot <= dmSlots && targets[slot-1] != nil:
		count(targets[slot-1])
	default:
		for _, t := range targets {
			count(t)
		}
	}
	if err := a.g.Send(resp[:], from); err != nil {
		for _, t := range targets {
			if t != nil {
				t.cfg.Logf("srp: DM answer to %v: %v", from.GID().Addr(), err)
				break
			}
		}
	}
}

// dmSlot is the controller slot a request addresses, 0 for the unit-wide
// attributes.
func dmSlot(req DMMAD) uint32 {
	h := req.Header()
	switch h.AttrID() {
	case DMAttrIOCProfile:
		return h.AttrMod()
	case DMAttrServiceEntries:
		return h.AttrMod() >> 16
	}
	return 0
}

// dmAnswer writes the GetResp to req into resp (mad.MADSize bytes) and
// returns its status.
func dmAnswer(req DMMAD, resp []byte, u *dmUnit) uint16 {
	r := DMMAD(resp[:mad.MADSize])
	copy(r[:DMDataOffset], req[:DMDataOffset])
	clear(r.Data())
	h := r.Header()
	h.SetMethod(mad.MethodGetResp)
	st := dmGet(req, r.Data(), u)
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
func dmGet(req DMMAD, data []byte, u *dmUnit) uint16 {
	mod := req.Header().AttrMod()
	switch req.Header().AttrID() {
	case DMAttrClassPortInfo:
		// Base and class version 1, response time value 20 (4.3 s) in
		// the low five bits of the third word, as ib_srpt reports.
		data[0], data[1] = mad.BaseVersion, DMClassVersion
		data[7] = 20
	case DMAttrIOUnitInfo:
		var slots [dmSlots]byte
		for i, x := range u.slots {
			if x != nil {
				slots[i] = IOCPresent
			}
		}
		PutIOUnitInfo(data, u.changeID, slots[:])
	case DMAttrIOCProfile:
		if mod == 0 || mod > dmSlots {
			return DMStatusInvalidField
		}
		info := u.slots[mod-1]
		if info == nil {
			return DMStatusNoIOC
		}
		PutIOCProfile(data, &info.ioc)
	case DMAttrServiceEntries:
		slot, hi, lo := mod>>16, uint8(mod>>8), uint8(mod)
		if slot == 0 || slot > dmSlots {
			return DMStatusInvalidField
		}
		info := u.slots[slot-1]
		if info == nil || lo > hi || hi > 0 {
			return DMStatusNoIOC
		}
		ServiceEntries(data[:ServiceEntriesCount*ServiceEntrySize]).PutServiceEntry(0, SRPServiceName(info.idExt), info.serviceID)
	default:
		return DMStatusUnsupportedMethodAttr
	}
	return 0
}

package cm

import (
	"softib/verbs"
	"softib/wire/mad"
)

// AHAttrFromPath returns the address vector of a path record as seen
// from its local end (the kernel's ib_init_ah_attr_from_path): the
// remote GID as destination, the path's hop limit, traffic class, flow
// label, SL, rate and remote LID, on port 1 with the local GID index
// sgidIndex; dport is the peer's RoCEv2 UDP port (0 = 4791).
func AHAttrFromPath(p *mad.Path, sgidIndex uint8, dport uint16) verbs.AHAttr {
	return verbs.AHAttr{
		GRH: verbs.GlobalRoute{
			DGID:         verbs.GID(p.RemoteGID),
			FlowLabel:    p.FlowLabel,
			SGIDIndex:    sgidIndex,
			HopLimit:     p.HopLimit,
			TrafficClass: p.TrafficClass,
		},
		DLID:       p.RemoteLID,
		SL:         p.SL,
		StaticRate: p.PacketRate,
		IsGlobal:   true,
		PortNum:    1,
		DPort:      dport,
	}
}

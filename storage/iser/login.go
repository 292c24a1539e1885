package iser

import (
	"fmt"
	"strconv"
	"strings"
)

// Login status classes and details (RFC 7143 §11.13.5).
const (
	statusSuccess          = 0x0000
	statusInitiatorError   = 0x0200
	statusAuthFailed       = 0x0201
	statusNotFound         = 0x0203
	statusMissingParam     = 0x0207
	statusUnsupportedVer   = 0x0205
	statusSessionTypeUnsup = 0x020a
	statusTargetError      = 0x0300
)

// Limits the target declares.
const (
	// recvDSL is the data segment the target receives in one SEND
	// (TargetRecvDataSegmentLength, and MaxRecvDataSegmentLength on
	// TCP): it bounds immediate data and login/text requests.
	recvDSL = 8192
	// sendDSL bounds what the target sends in one SEND (login and text
	// responses; full-feature responses are far smaller).
	sendDSL = 8192
	// maxBurst is the largest data transfer of one command.
	maxBurst = 512 << 10
)

// params are a session's negotiated operational parameters.
type params struct {
	rdma          bool
	discovery     bool
	initiatorName string
	targetName    string
	immediateData bool
	firstBurst    int
	// maxSendDSL is the data segment the initiator receives
	// (InitiatorRecvDataSegmentLength or its MaxRecvDataSegmentLength).
	maxSendDSL int
}

// loginState follows one connection's login phase.
type loginState struct {
	p        params
	started  bool
	stage    int
	authDone bool
	tsih     uint16
	cmdSN    uint32 // the CmdSN the first full-feature command carries
	isid     [6]byte
	itt      uint32
}

// loginResult is the target's answer to one login request.
type loginResult struct {
	status   uint16
	transit  bool
	csg, nsg int
	text     []byte
	// done: the connection enters full feature phase after this response.
	done bool
}

func (r *loginResult) fail(status uint16) *loginResult { r.status = status; r.text = nil; return r }

// login processes one login request; tgt names the target (its IQN and
// portal) for the checks of TargetName.
func (ls *loginState) login(req BHS, data []byte, tgt *Target) *loginResult {
	r := &loginResult{csg: req.CSG(), nsg: req.NSG()}
	if req[3] != 0 { // VersionMin must be 0, the only version
		return r.fail(statusUnsupportedVer)
	}
	if req.Flags()&flagContinue != 0 {
		// Multi-PDU text in login is not needed by any initiator that
		// fits our 8 KiB receive buffer.
		return r.fail(statusInitiatorError)
	}
	if !ls.started {
		ls.started = true
		ls.isid, ls.itt, ls.cmdSN = req.ISID(), req.ITT(), req.CmdSN()
		ls.p.immediateData, ls.p.firstBurst, ls.p.maxSendDSL = false, 0, 8192
	}
	ls.cmdSN = req.CmdSN()
	if r.csg != ls.stage && !(ls.stage == StageSecurity && r.csg == StageOperational) {
		return r.fail(statusInitiatorError)
	}
	ls.stage = r.csg
	kvs, err := ParseText(data)
	if err != nil {
		return r.fail(statusInitiatorError)
	}
	var out []KV
	for _, kv := range kvs {
		reply, st := ls.key(kv, tgt)
		if st != statusSuccess {
			return r.fail(st)
		}
		if reply != "" {
			out = append(out, KV{kv.Key, reply})
		}
	}
	if ls.p.initiatorName == "" {
		return r.fail(statusMissingParam)
	}
	if !ls.p.discovery {
		if ls.p.targetName == "" {
			return r.fail(statusMissingParam)
		}
		if ls.p.targetName != tgt.cfg.IQN {
			return r.fail(statusNotFound)
		}
	}
	if r.csg == StageSecurity && !ls.authDone {
		// No AuthMethod offered: the initiator skips authentication,
		// which the target (AuthMethod=None only) allows.
		ls.authDone = true
	}
	if r.csg == StageSecurity && !ls.p.discovery && !hasKey(out, "TargetPortalGroupTag") {
		out = append(out, KV{"TargetPortalGroupTag", "1"})
	}
	if req.Flags()&flagFinal != 0 {
		if r.nsg <= r.csg || r.nsg == 2 {
			return r.fail(statusInitiatorError)
		}
		r.transit = true
		ls.stage = r.nsg
		if r.nsg == StageFullFeature {
			r.done = true
			if ls.tsih == 0 {
				ls.tsih = tgt.nextTSIH()
			}
		}
	} else {
		r.nsg = 0
	}
	r.text = AppendText(nil, out...)
	return r
}

func hasKey(kvs []KV, k string) bool {
	for _, kv := range kvs {
		if kv.Key == k {
			return true
		}
	}
	return false
}

func num(v string) (int, bool) {
	n, err := strconv.Atoi(v)
	return n, err == nil && n > 0 && n < 1<<24
}

// key negotiates one key: it returns the value to answer with ("" to
// answer nothing: declarations the target just records) or a login
// status that ends the login.
func (ls *loginState) key(kv KV, tgt *Target) (string, uint16) {
	p := &ls.p
	switch kv.Key {
	case "InitiatorName":
		p.initiatorName = kv.Value
		return "", statusSuccess
	case "InitiatorAlias":
		return "", statusSuccess
	case "TargetName":
		p.targetName = kv.Value
		return "", statusSuccess
	case "SessionType":
		switch kv.Value {
		case "Normal":
			p.discovery = false
		case "Discovery":
			p.discovery = true
		default:
			return "", statusSessionTypeUnsup
		}
		return "", statusSuccess
	case "AuthMethod":
		for _, m := range strings.Split(kv.Value, ",") {
			if m == "None" {
				ls.authDone = true
				return "None", statusSuccess
			}
		}
		return "", statusAuthFailed
	case "HeaderDigest", "DataDigest":
		for _, m := range strings.Split(kv.Value, ",") {
			if m == "None" {
				return "None", statusSuccess
			}
		}
		return "Reject", statusSuccess
	case "InitialR2T":
		// OR function: Yes, so the only unsolicited data is immediate.
		return "Yes", statusSuccess
	case "ImmediateData":
		p.immediateData = kv.Value == "Yes"
		return kv.Value, statusSuccess
	case "FirstBurstLength":
		n, ok := num(kv.Value)
		if !ok {
			return "Reject", statusSuccess
		}
		p.firstBurst = min(n, maxBurst)
		return strconv.Itoa(p.firstBurst), statusSuccess
	case "MaxBurstLength":
		n, ok := num(kv.Value)
		if !ok {
			return "Reject", statusSuccess
		}
		return strconv.Itoa(min(n, maxBurst)), statusSuccess
	case "MaxRecvDataSegmentLength":
		if n, ok := num(kv.Value); ok && (!p.rdma || p.discovery) {
			p.maxSendDSL = min(n, sendDSL)
		}
		// A declaration: answer with ours.
		return strconv.Itoa(recvDSL), statusSuccess
	case "InitiatorRecvDataSegmentLength":
		n, ok := num(kv.Value)
		if !ok || !p.rdma {
			return "Irrelevant", statusSuccess
		}
		p.maxSendDSL = min(n, sendDSL)
		return strconv.Itoa(p.maxSendDSL), statusSuccess
	case "TargetRecvDataSegmentLength":
		if !p.rdma {
			return "Irrelevant", statusSuccess
		}
		n, ok := num(kv.Value)
		if !ok {
			return "Reject", statusSuccess
		}
		return strconv.Itoa(min(n, recvDSL)), statusSuccess
	case "RDMAExtensions":
		if p.rdma && kv.Value == "Yes" {
			return "Yes", statusSuccess
		}
		return "No", statusSuccess
	case "MaxOutstandingR2T", "MaxConnections":
		return "1", statusSuccess
	case "DataPDUInOrder", "DataSequenceInOrder":
		return "Yes", statusSuccess
	case "ErrorRecoveryLevel":
		return "0", statusSuccess
	case "IFMarker", "OFMarker":
		return "No", statusSuccess
	case "DefaultTime2Wait":
		n, ok := num(kv.Value)
		if !ok && kv.Value != "0" {
			return "Reject", statusSuccess
		}
		return strconv.Itoa(max(n, 2)), statusSuccess
	case "DefaultTime2Retain":
		n, ok := num(kv.Value)
		if !ok && kv.Value != "0" {
			return "Reject", statusSuccess
		}
		return strconv.Itoa(min(n, 20)), statusSuccess
	case "OFMarkInt", "IFMarkInt":
		return "Irrelevant", statusSuccess
	}
	return "NotUnderstood", statusSuccess
}

// sendTargets answers a discovery session's SendTargets=All (RFC 7143
// Appendix C) with the target's name and portal.
func sendTargets(value string, tgt *Target) ([]byte, error) {
	if value != "All" && value != tgt.cfg.IQN && value != "" {
		return nil, nil
	}
	return AppendText(nil, KV{"TargetName", tgt.cfg.IQN},
		KV{"TargetAddress", fmt.Sprintf("%s,1", tgt.portal())}), nil
}

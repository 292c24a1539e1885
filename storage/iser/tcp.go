package iser

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// serveTCP accepts discovery connections: iSCSI over TCP (RFC 7143),
// login with SessionType=Discovery, SendTargets text requests, logout.
// Normal sessions over TCP are refused at login: data moves over RDMA.
func (t *Target) serveTCP() {
	for {
		nc, err := t.tcp.Accept()
		if err != nil {
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer nc.Close()
			if err := t.discovery(nc); err != nil {
				t.cfg.Logf("iser: discovery connection from %v: %v", nc.RemoteAddr(), err)
			}
		}()
	}
}

// pad4 rounds a TCP data segment up to the 4-byte boundary.
func pad4(n int) int { return (n + 3) &^ 3 }

func (t *Target) discovery(nc net.Conn) error {
	r := bufio.NewReader(nc)
	var ls loginState
	var statSN, expCmdSN uint32
	full := false
	hdr := make([]byte, BHSLen)
	for {
		nc.SetReadDeadline(time.Now().Add(2 * time.Minute))
		if _, err := io.ReadFull(r, hdr); err != nil {
			if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
				return nil // iscsiadm may close without a logout
			}
			return err
		}
		h := BHS(hdr)
		dl := h.DataLen()
		if dl > recvDSL || h.AHSLen() > 0 {
			return ErrBadPDU
		}
		data := make([]byte, pad4(dl))
		if _, err := io.ReadFull(r, data); err != nil {
			return err
		}
		data = data[:dl]
		rsp := BHS(make([]byte, BHSLen))
		var out []byte
		closeAfter := false
		if !h.Immediate() && full {
			expCmdSN = h.CmdSN() + 1
		}
		switch h.Opcode() {
		case OpLoginReq:
			if full {
				return ErrBadPDU
			}
			res := ls.login(h, data, t)
			if res.status == statusSuccess && !ls.p.discovery {
				// Normal sessions need RDMA.
				res.fail(statusSessionTypeUnsup)
			}
			rsp[0] = OpLoginRsp
			if res.transit {
				rsp[1] = flagFinal
			}
			rsp[1] |= byte(res.csg)<<2 | byte(res.nsg)
			copy(rsp[8:14], ls.isid[:])
			binary.BigEndian.PutUint16(rsp[14:16], ls.tsih)
			rsp[36], rsp[37] = byte(res.status>>8), byte(res.status)
			out = res.text
			expCmdSN = h.CmdSN()
			if statSN == 0 {
				statSN = h.ExpStatSN()
			}
			if res.status != statusSuccess {
				t.Stats.LoginFailures.Add(1)
				closeAfter = true
			} else if res.done {
				full = true
				t.Stats.Discoveries.Add(1)
			}
		case OpTextReq:
			if !full {
				return ErrBadPDU
			}
			kvs, err := ParseText(data)
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				if kv.Key == "SendTargets" {
					out, _ = sendTargets(kv.Value, t)
				}
			}
			rsp[0], rsp[1] = OpTextRsp, flagFinal
			rsp.PutU32(20, noTag)
		case OpLogoutReq:
			rsp[0], rsp[1] = OpLogoutRsp, flagFinal
			closeAfter = true
		case OpNOPOut:
			if h.ITT() == noTag {
				continue
			}
			rsp[0], rsp[1] = OpNOPIn, flagFinal
			copy(rsp[8:16], h[8:16])
			rsp.PutU32(20, noTag)
			out = data
		default:
			rsp[0], rsp[1], rsp[2] = OpReject, flagFinal, 0x05
			out = append([]byte(nil), h...)
		}
		if rsp[0] != OpReject {
			rsp.PutU32(16, h.ITT())
		} else {
			rsp.PutU32(16, noTag)
		}
		if len(out) > ls.p.maxSendDSL && ls.p.maxSendDSL > 0 {
			out = out[:ls.p.maxSendDSL]
		}
		rsp.SetDataLen(len(out))
		rsp.PutU32(24, statSN)
		statSN++
		rsp.PutU32(28, expCmdSN)
		rsp.PutU32(32, expCmdSN+7)
		msg := append(append([]byte(rsp), out...), make([]byte, pad4(len(out))-len(out))...)
		if _, err := nc.Write(msg); err != nil {
			return err
		}
		if closeAfter {
			return nil
		}
	}
}

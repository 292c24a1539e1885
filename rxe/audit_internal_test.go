package rxe

import (
	"testing"

	"softib/verbs"
	"softib/wire/roce"
)

// rigEvents returns the async events the rig's device raised so far.
func (r *roleRig) rigEvents() []verbs.EventType {
	var out []verbs.EventType
	for {
		select {
		case e := <-r.dev.Events():
			out = append(out, e.Type)
		default:
			return out
		}
	}
}

// TestCompleterFatalResponses: the completer's two error verdicts that
// follow rxe_comp.c's check_ack: a READ response for a request that was
// no READ completes it with FATAL_ERR, a NAK with a reserved code with
// REM_OP_ERR; either moves the QP to ERR with a QP_FATAL event.
func TestCompleterFatalResponses(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   roce.Opcode
		syn  roce.Syndrome
		pay  []byte
		want verbs.WCStatus
	}{
		{"READ response to a SEND", roce.RCReadResponseOnly, roce.SyndromeACKUnlimited, make([]byte, 16), verbs.WCFatalErr},
		{"reserved NAK code", roce.RCAck, roce.NAKSyndrome(5), nil, verbs.WCRemOpErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRoleRig(t, 1<<12)
			r.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{r.mr.SGE(0, 16)}})
			r.q.req.run(rigNow, procBudget)
			r.want("SEND", exp(roce.RCSendOnly, rigSQPSN))
			r.rigEvents()
			r.response(rigNow+1, tc.op, rigSQPSN, tc.syn, 1, tc.pay)
			r.wantWCs(tc.name, verbs.WC{WRID: 1, Status: tc.want, Opcode: verbs.WCSend})
			if r.q.state != verbs.QPStateErr {
				t.Fatalf("QP state %v, want ERR", r.q.state)
			}
			if ev := r.rigEvents(); len(ev) != 1 || ev[0] != verbs.EventQPFatal {
				t.Fatalf("events %v, want QP_FATAL", ev)
			}
		})
	}
}

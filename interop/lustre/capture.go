package lustre

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"softib/internal/tsharktest"
	"softib/interop/vm"
)

// AcceptPort is the LNet acceptor port both sides use (socklnd's 988).
const AcceptPort = 988

// Capture starts tcpdump on the guest's tap (every frame both ways) into a
// file in the test's temporary directory and returns it; stop it with
// Stop or Dropped before reading the file. It is stopped when the test
// ends, and copied to $SOFTIB_INTEROP_PCAP_DIR when that is set.
func (g *Guest) Capture(t testing.TB) *vm.Capture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tap.pcap")
	c, err := g.VM.Capture(g.ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		keepPcap(t, path)
	})
	return c
}

// StopCapture stops c after letting the last frames reach tcpdump, and
// logs what the kernel dropped from the capture. The decode checks read
// it back ([Gaps]): a capture that lost frames cannot be judged after a
// gap in a TCP stream.
func StopCapture(t testing.TB, c *vm.Capture) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	n, ok := c.Dropped()
	if !ok || n != 0 {
		t.Logf("capture incomplete: tcpdump reports %d frames dropped (count reported: %v)", n, ok)
	}
	incomplete.Store(c.Path, !ok || n != 0)
}

// incomplete holds, by capture path, whether StopCapture found frames
// dropped (or no count).
var incomplete sync.Map

// GapField is the tshark field [Gaps.AfterGap] needs beside the expert
// messages; decode checks append it to theirs.
const GapField = "tcp.stream"

// gapMsg is Wireshark's expert message on the first TCP segment after one
// it did not see.
const gapMsg = "Previous segment(s) not captured"

// Gaps tells a decode check which frames a lossy capture leaves unjudgeable.
// When tcpdump dropped frames, Wireshark's LNet reassembly of a TCP stream
// loses its place at the first missing segment and reads what follows as
// garbage; frames of such a stream from its first gap on are counted, not
// judged. A capture without drops is judged whole: there a missing
// segment is a fault like any other.
type Gaps struct {
	lossy   bool
	gapped  map[string]bool
	Skipped int // frames with errors left unjudged: the caller counts them
}

// NewGaps returns the Gaps of the capture at path (after StopCapture).
func NewGaps(path string) *Gaps {
	v, _ := incomplete.Load(path)
	lossy, _ := v.(bool)
	return &Gaps{lossy: lossy, gapped: map[string]bool{}}
}

// AfterGap reports whether a frame, whose tcp.stream and expert messages
// are stream and msgs (GapField, _ws.expert.message), lies at or after a capture gap of
// its stream in a lossy capture. Call it for every frame in order.
func (g *Gaps) AfterGap(stream, msgs string) bool {
	if !g.lossy || stream == "" {
		return false
	}
	if strings.Contains(msgs, gapMsg) {
		g.gapped[stream] = true
	}
	return g.gapped[stream]
}

// Decoded counts what tshark decoded in a capture.
type Decoded struct {
	Frames int
	// Sock counts socklnd messages by ksm_type (0x000000c0 NOOP,
	// 0x000000c1 LNet message) and HELLOs by connection type as
	// "hello N".
	Sock map[string]int
	// IB counts o2iblnd messages by kib_msg type (0xc0 CONNREQ, 0xc1
	// CONNACK, 0xd0 NOOP, 0xd1 IMMEDIATE, ...).
	IB map[string]int
	// LNet counts LNet messages by type (0 ACK, 1 PUT, 2 GET, 3 REPLY,
	// 4 HELLO) over both LNDs.
	LNet map[string]int
	// Pushes counts frames carrying discovery pushes (see [PushFrame]),
	// which Wireshark 4.0 flags; counted, not judged.
	Pushes int
	// Rejects counts CM REJs carrying a kib_rej (o2iblnd's reject
	// reason), which Wireshark cannot decode.
	Rejects int
}

// CheckDecode runs tshark over a tap capture (socklnd decoded as LNet on
// AcceptPort, RoCEv2 on UDP 4791 by the infiniband dissector, which hands
// o2iblnd's messages to Wireshark's LNet dissector) and fails t for every
// malformed frame or error-level expert item. It returns what was decoded.
func CheckDecode(t testing.TB, path string) Decoded {
	t.Helper()
	decode := []string{"-d", "tcp.port==" + strconv.Itoa(AcceptPort) + ",lnet"}
	rows := tsharktest.Fields(t, path, []string{"frame.number", "_ws.malformed", "_ws.expert.severity",
		"_ws.expert.message", "_ws.col.Info", "lnet.ksm_type", "lnet.ib.type", "lnet.msg_type", "lnet.hello_type",
		"infiniband.mad.attributeid", "lnet.ib.magic", "lnet.ptl_index", "lnet.msg_dst_match_bits", GapField}, decode...)
	d := Decoded{Frames: len(rows), Sock: map[string]int{}, IB: map[string]int{}, LNet: map[string]int{}}
	gaps := NewGaps(path)
	resent := 0
	for _, r := range rows {
		afterGap := gaps.AfterGap(r[13], r[3])
		if r[9] == "0x0012" && r[10] != "" {
			// A CM REJ carrying a kib_rej (magic, version, reason,
			// incarnation, connection parameters): Wireshark 4.0's LNet
			// dissector reads any o2iblnd private data as a kib_msg and
			// flags the kib_rej as malformed. Counted, not judged.
			d.Rejects++
			continue
		}
		sev := strings.Split(r[2], ",")
		msgs := strings.Split(r[3], ",")
		var errs []string
		resentHere := 0
		for i, s := range sev {
			v, err := strconv.ParseUint(s, 0, 32)
			if err != nil || v < 0x00800000 { // below PI_ERROR
				continue
			}
			m := ""
			if i < len(msgs) {
				m = msgs[i]
			}
			if tsharktest.TCPResentOverlap(r[4], m) {
				resentHere++ // the same bytes again: TCP's, not LNet's
				continue
			}
			errs = append(errs, m)
		}
		resent += resentHere
		// _ws.malformed is also set by a resent segment's reassembly
		// overlap (an error item of the Malformed group).
		malformed := r[1] != "" && !(resentHere > 0 && len(errs) == 0)
		if (malformed || len(errs) > 0) && PushFrame(errs, r[7], r[11], r[12]) {
			d.Pushes++
			continue
		}
		if afterGap && (malformed || len(errs) > 0 || strings.Contains(r[4], "Malformed")) {
			gaps.Skipped++
			continue
		}
		if malformed || strings.Contains(r[4], "Malformed") {
			t.Errorf("tshark: frame %s malformed: %s", r[0], r[4])
		}
		for _, m := range errs {
			t.Errorf("tshark: frame %s: %s (%s)", r[0], m, r[4])
		}
		for _, k := range splitNonEmpty(r[5]) {
			d.Sock[k]++
		}
		for _, k := range splitNonEmpty(r[8]) {
			d.Sock["hello "+k]++
		}
		for _, k := range splitNonEmpty(r[6]) {
			d.IB[k]++
		}
		for _, k := range splitNonEmpty(r[7]) {
			d.LNet[k]++
		}
	}
	t.Logf("tshark: %d frames; socklnd %v, o2iblnd %v, LNet messages %v, kib_rej REJs %d, discovery pushes flagged %d, frames in error after a capture gap (not judged) %d, TCP segments sent again %d",
		d.Frames, d.Sock, d.IB, d.LNet, d.Rejects, d.Pushes, gaps.Skipped, resent)
	return d
}

func splitNonEmpty(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// pingMatchBits is LNET_PROTO_PING_MATCHBITS: the match bits of pings and
// of discovery pushes (PUTs of a ping buffer to portal 0).
const pingMatchBits = 0x8000000000000000

// wsLustreRPC is the error Wireshark 4.0's LNet dissector reports when it
// reads a PUT's payload as a Lustre RPC that it is not.
var wsLustreRPC = regexp.MustCompile(`^Capture:\d+ offset:\d+ \(length:\d+\) msg_type:\d ib_type:`)

// Msg is one LNet message of a frame as tshark lists it.
type Msg struct {
	Type   string // lnet.msg_type: 0 ACK, 1 PUT, 2 GET, 3 REPLY, 4 HELLO
	Portal string // PUTs and GETs: lnet.ptl_index
	Bits   uint64 // PUTs and GETs: lnet.msg_dst_match_bits (an ACK's are not kept)
}

// FrameMsgs pairs one frame's tshark lists (lnet.msg_type,
// lnet.ptl_index, lnet.msg_dst_match_bits; comma-separated, one entry per
// occurrence). The portal occurs for PUTs and GETs only, the match bits
// for ACKs, PUTs and GETs (Wireshark 4.0), so the lists are paired by
// message type, not by index: how many messages of which types share one
// TCP segment is timing. ok is false when they do not pair.
func FrameMsgs(types, ptls, mbits string) (msgs []Msg, ok bool) {
	ty, pt, mb := splitNonEmpty(types), splitNonEmpty(ptls), splitNonEmpty(mbits)
	np, nb := 0, 0
	for _, t := range ty {
		switch t {
		case "1", "2":
			np++
			nb++
		case "0":
			nb++
		}
	}
	if len(pt) != np || len(mb) != nb {
		return nil, false
	}
	p, b := 0, 0
	for _, t := range ty {
		m := Msg{Type: t}
		if t == "0" || t == "1" || t == "2" {
			v, err := strconv.ParseUint(mb[b], 0, 64)
			if err != nil {
				return nil, false
			}
			b++
			if t != "0" {
				m.Portal, m.Bits = pt[p], v
				p++
			}
		}
		msgs = append(msgs, m)
	}
	return msgs, true
}

// push reports whether m is a discovery push: a PUT of a ping buffer to
// portal 0 with the ping match bits.
func (m Msg) push() bool { return m.Type == "1" && m.Portal == "0" && m.Bits == pingMatchBits }

// allMatch reports whether errs is not empty and re matches every entry.
func allMatch(re *regexp.Regexp, errs []string) bool {
	n := 0
	for _, e := range errs {
		if e == "" {
			continue
		}
		if !re.MatchString(e) {
			return false
		}
		n++
	}
	return n > 0
}

// PushFrame reports whether a frame tshark flagged with the expert
// messages errs owes them to discovery pushes: every message is
// Wireshark 4.0's reading of a PUT's payload as a Lustre RPC, and the
// frame's PUTs (tshark's lnet.msg_type, lnet.ptl_index and
// lnet.msg_dst_match_bits lists, see [FrameMsgs]) are all pushes, at
// least one. Wireshark knows no push and reads the pushed ping buffer as
// a Lustre RPC; with discovery on, the kernel pushes its ping buffer to a
// Multi-Rail peer it discovered (lnet_peer_send_push), and so does softib:
// such frames are no fault. Messages of other types in the same frame
// (ACKs, GETs, REPLYs) carry no payload Wireshark misreads.
func PushFrame(errs []string, types, ptls, mbits string) bool {
	msgs, ok := FrameMsgs(types, ptls, mbits)
	if !ok || !allMatch(wsLustreRPC, errs) {
		return false
	}
	pushes := 0
	for _, m := range msgs {
		switch {
		case m.push():
			pushes++
		case m.Type == "1":
			return false
		}
	}
	return pushes > 0
}

// SelftestPortals are lnet_selftest's portals: requests (50), framework
// requests (51), replies and bulk (52).
var SelftestPortals = map[string]bool{"50": true, "51": true, "52": true}

// wsUnknownPortal is the error Wireshark 4.0's LNet dissector reports for
// a PUT to a portal it does not know (it knows Lustre's, not
// lnet_selftest's): it tries to read the payload as a Lustre RPC.
// Over o2iblnd it says so for IMMEDIATE PUTs too, and throws an exception
// on a GET_REQ to portal 52 (brw write's bulk GET).
var wsUnknownPortal = regexp.MustCompile(`^(Capture:\d+ offset:\d+ \(length:\d+\) msg_type:\d ib_type:|Malformed Packet \(Exception occurred\)$)`)

// SelftestFrame reports whether a frame tshark flagged with errs owes
// them to Wireshark 4.0's LNet dissector not knowing lnet_selftest's
// portals: every message is that limitation's (wsUnknownPortal), the
// frame carries a PUT or GET on a selftest portal (or, with replies, a
// REPLY: over o2iblnd a PUT_REQ carrying a REPLY is read the same way),
// and every PUT in it is to a selftest portal or a discovery push, so no
// other PUT can be the one misread.
func SelftestFrame(errs []string, types, ptls, mbits string, replies bool) bool {
	msgs, ok := FrameMsgs(types, ptls, mbits)
	if !ok || !allMatch(wsUnknownPortal, errs) {
		return false
	}
	culprit := false
	for _, m := range msgs {
		selftest := (m.Type == "1" || m.Type == "2") && SelftestPortals[m.Portal]
		if selftest || replies && m.Type == "3" {
			culprit = true
		}
		if m.Type == "1" && !selftest && !m.push() {
			return false
		}
	}
	return culprit
}

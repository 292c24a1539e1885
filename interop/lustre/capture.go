package lustre

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
// logs what the kernel dropped from the capture.
func StopCapture(t testing.TB, c *vm.Capture) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	if n, ok := c.Dropped(); !ok || n != 0 {
		t.Logf("capture incomplete: tcpdump reports %d frames dropped (count reported: %v)", n, ok)
	}
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
		"infiniband.mad.attributeid", "lnet.ib.magic", "lnet.ptl_index", "lnet.msg_dst_match_bits"}, decode...)
	d := Decoded{Frames: len(rows), Sock: map[string]int{}, IB: map[string]int{}, LNet: map[string]int{}}
	for _, r := range rows {
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
		for i, s := range sev {
			v, err := strconv.ParseUint(s, 0, 32)
			if err != nil || v < 0x00800000 { // below PI_ERROR
				continue
			}
			m := ""
			if i < len(msgs) {
				m = msgs[i]
			}
			errs = append(errs, m)
		}
		if (r[1] != "" || len(errs) > 0) && PushFrame(errs, r[7], r[11], r[12]) {
			d.Pushes++
			continue
		}
		if r[1] != "" || strings.Contains(r[4], "Malformed") {
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
	t.Logf("tshark: %d frames; socklnd %v, o2iblnd %v, LNet messages %v, kib_rej REJs %d, discovery pushes flagged %d",
		d.Frames, d.Sock, d.IB, d.LNet, d.Rejects, d.Pushes)
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

// PushFrame reports whether a frame tshark flagged with the expert
// messages errs carries only discovery pushes (tshark's lnet.msg_type,
// lnet.ptl_index and lnet.msg_dst_match_bits lists: PUTs to portal 0 with
// the ping match bits) and every message is Wireshark 4.0's: it knows no
// push and reads the pushed ping buffer as a Lustre RPC. With discovery on,
// the kernel pushes its ping buffer to a Multi-Rail peer it discovered
// (lnet_peer_send_push), and so does softib: such frames are no fault.
func PushFrame(errs []string, types, ptls, mbits string) bool {
	ty, pt, mb := strings.Split(types, ","), strings.Split(ptls, ","), strings.Split(mbits, ",")
	if types == "" || len(pt) != len(ty) || len(mb) != len(ty) {
		return false
	}
	for i := range ty {
		bits, err := strconv.ParseUint(mb[i], 0, 64)
		if ty[i] != "1" || pt[i] != "0" || err != nil || bits != pingMatchBits {
			return false
		}
	}
	n := 0
	for _, e := range errs {
		if e == "" {
			continue
		}
		if !wsLustreRPC.MatchString(e) {
			return false
		}
		n++
	}
	return n > 0
}

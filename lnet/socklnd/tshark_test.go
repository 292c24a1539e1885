package socklnd_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"softib/internal/e2etest"
	"softib/internal/tsharktest"
	"softib/lnet/socklnd"
)

// capture captures the acceptor-port TCP traffic of the given hosts on
// lo until stop is called.
func capture(t *testing.T, port int, hosts ...string) (path string, stop func()) {
	t.Helper()
	var filter []string
	for _, h := range hosts {
		filter = append(filter, "host "+h)
	}
	c := e2etest.StartCapture(t, "lo", "tcp port "+strconv.Itoa(port)+" and ("+strings.Join(filter, " or ")+")")
	return c.Path, c.Stop
}

// TestTsharkDecode captures real socklnd traffic (handshakes, PUT/ACK,
// GET/REPLY, zero-copy ACK NOOPs, checksummed V2) and has Wireshark's
// LNet dissector decode it: no malformed packets, and the message types
// and lengths it sees match what was sent.
func TestTsharkDecode(t *testing.T) {
	port := socklnd.TestPort()
	ips := socklnd.TestIPs(4)
	path, stop := capture(t, port, ips...)
	a := newInst(t, ips[0], socklnd.BaseConfig())
	b := newInst(t, ips[1], socklnd.BaseConfig())
	for i, size := range []int{0, 100, 4096, 64 << 10} {
		putGet(t, a, b, size, uint64(i+1))
	}
	v2 := socklnd.BaseConfig()
	v2.Version, v2.EnableCsum = 2, true
	c := newInst(t, ips[2], v2)
	d := newInst(t, ips[3], v2)
	putGet(t, c, d, 20000, 50)
	stop()

	decode := []string{"-d", "tcp.port==" + strconv.Itoa(port) + ",lnet"}
	if p := os.Getenv("SOCKLND_KEEP_PCAP"); p != "" {
		b, _ := os.ReadFile(path)
		os.WriteFile(p, b, 0o644)
	}
	checkDecode(t, path, decode)
	rows := tsharktest.Fields(t, path, []string{"lnet.ksm_type", "lnet.msg_type", "lnet.payload_length"}, append(decode, "-Y", "lnet.ksm_type")...)
	seen := map[string]int{}
	for _, r := range rows {
		for _, k := range strings.Split(r[0], ",") {
			seen["ksm "+k]++
		}
		for _, m := range strings.Split(r[1], ",") {
			if m != "" {
				seen["msg "+m]++
			}
		}
	}
	t.Logf("tshark saw %v in %d packets", seen, len(rows))
	// Five PUT/ACK/GET/REPLY exchanges, and before the first of a→b and
	// of c→d a discovery round (lnet discovers a peer on the first send):
	// a ping (GET/REPLY) and a push of the sender's NIDs (PUT/ACK), so 7
	// of each type; at least the ZC-ACK NOOPs of the three ≥16 KiB
	// payloads.
	for want, n := range map[string]int{"ksm 0x000000c1": 28, "msg 0": 7, "msg 1": 7, "msg 2": 7, "msg 3": 7} {
		if seen[want] != n {
			t.Errorf("tshark decoded %d %q, want %d", seen[want], want, n)
		}
	}
	if seen["ksm 0x000000c0"] < 3 {
		t.Errorf("tshark decoded %d NOOPs, want ≥ 3", seen["ksm 0x000000c0"])
	}
}

// putPayloadLeft matches the one error Wireshark 4.0's LNet dissector
// raises on valid traffic: it hands a PUT's payload to the Lustre ptlrpc
// dissector registered for the portal, and when that consumes nothing
// (our payload is a test pattern, not a ptlrpc message) it reports the
// payload bytes as a buffer-length mismatch.
var putPayloadLeft = regexp.MustCompile(`^Capture:(\d+) offset:(\d+) \(length:\d+\) msg_type:1 ib_type:00$`)

// checkDecode fails the test for every malformed packet or error-level
// expert item, except PUT payloads left undissected (putPayloadLeft) whose
// size is exactly the frame's LNet payload_length.
func checkDecode(t *testing.T, path string, decode []string) {
	t.Helper()
	rows := tsharktest.Fields(t, path, []string{"frame.number", "_ws.malformed", "_ws.expert.severity",
		"_ws.expert.message", "lnet.payload_length", "_ws.col.Info"}, decode...)
	allowed, resent := 0, 0
	for _, r := range rows {
		// _ws.malformed is also set by error items of the Malformed
		// group, which the loop below judges one by one; a dissector
		// exception shows up in Info and as its own error item.
		if strings.Contains(r[5], "Malformed") {
			t.Errorf("tshark: frame %s malformed: %s", r[0], r[5])
			continue
		}
		sev := strings.Split(r[2], ",")
		msgs := strings.Split(r[3], ",")
		lens := strings.Split(r[4], ",")
		for i, sv := range sev {
			v, err := strconv.ParseUint(sv, 0, 32)
			if err != nil || v < 0x00800000 || i >= len(msgs) {
				continue
			}
			if tsharktest.TCPResentOverlap(r[5], msgs[i]) {
				resent++
				continue
			}
			if m := putPayloadLeft.FindStringSubmatch(msgs[i]); m != nil {
				c, _ := strconv.Atoi(m[1])
				o, _ := strconv.Atoi(m[2])
				if slices.Contains(lens, strconv.Itoa(c-o)) {
					allowed++
					continue
				}
			}
			t.Errorf("tshark: frame %s: %s (%s)", r[0], msgs[i], r[5])
		}
	}
	t.Logf("%d frames decoded; %d PUT payloads left to the Lustre dissector; %d segments TCP sent again", len(rows), allowed, resent)
}

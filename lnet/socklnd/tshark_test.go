package socklnd_test

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"softib/internal/testenv"
	"softib/internal/tsharktest"
	"softib/lnet/socklnd"
)

// capture runs dumpcap (shipped with tshark) on lo for the given hosts
// until the returned stop function is called, writing a pcap into the
// test's temp dir.
func capture(t *testing.T, port int, hosts ...string) (path string, stop func()) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "tshark")
	dumpcap := testenv.RequireTool(t, "dumpcap")
	path = filepath.Join(t.TempDir(), "socklnd.pcap")
	var filter []string
	for _, h := range hosts {
		filter = append(filter, "host "+h)
	}
	expr := "tcp port " + strconv.Itoa(port) + " and (" + strings.Join(filter, " or ") + ")"
	cmd := exec.Command(dumpcap, "-i", "lo", "-P", "-B", "32", "-f", expr, "-w", path)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			t.Logf("dumpcap: %s", sc.Text())
			if !once && strings.Contains(sc.Text(), "Capturing on") {
				once = true
				close(ready)
			}
		}
		if !once {
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-time.After(hangGuard):
		t.Fatal("hang guard: dumpcap did not start")
	}
	// dumpcap announces itself before its filter is live: probe (a
	// refused connect matching the filter) until packets reach the file.
	probe := net.JoinHostPort(hosts[0], strconv.Itoa(port))
	deadline := time.Now().Add(hangGuard)
	for {
		if c, err := net.DialTimeout("tcp4", probe, time.Second); err == nil {
			c.Close()
		}
		time.Sleep(20 * time.Millisecond)
		if fi, err := os.Stat(path); err == nil && fi.Size() > 24 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("hang guard: dumpcap captures nothing")
		}
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		// Let dumpcap drain what it has buffered: wait until the file
		// stops growing.
		last, same := int64(-1), 0
		for range 200 {
			time.Sleep(50 * time.Millisecond)
			fi, err := os.Stat(path)
			if err != nil {
				break
			}
			if fi.Size() == last {
				if same++; same == 6 {
					break
				}
				continue
			}
			last, same = fi.Size(), 0
		}
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	}
	t.Cleanup(stop)
	return path, stop
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
	// Five PUT/ACK/GET/REPLY exchanges; at least the ZC-ACK NOOPs of the
	// three ≥16 KiB payloads.
	for want, n := range map[string]int{"ksm 0x000000c1": 20, "msg 0": 5, "msg 1": 5, "msg 2": 5, "msg 3": 5} {
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
	allowed := 0
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
	t.Logf("%d frames decoded; %d PUT payloads left to the Lustre dissector", len(rows), allowed)
}

// Package tsharktest runs tshark over capture files in tests: full decodes,
// field extraction and a check that Wireshark finds nothing malformed.
//
// Every helper calls testenv.RequireTool(t, "tshark"), so tests skip on a
// developer machine without tshark and fail in CI. RoCEv2 on UDP port 4791
// is decoded by the infiniband dissector without any option; for another
// port pass "-d", "udp.port==N,infiniband" as an extra argument.
package tsharktest

import (
	"bytes"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"softib/internal/testenv"
)

// Run runs `tshark -n -r pcapPath args...` and returns its standard output.
// It fails the test if tshark exits with an error.
func Run(t testing.TB, pcapPath string, args ...string) string {
	t.Helper()
	bin := testenv.RequireTool(t, "tshark")
	argv := append([]string{"-n", "-r", pcapPath}, args...)
	cmd := exec.Command(bin, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark %s: %v\n%s", strings.Join(argv, " "), err, stderr.String())
	}
	return stdout.String()
}

// Decode returns tshark's full packet-details text (-V) for the file.
func Decode(t testing.TB, pcapPath string, extraArgs ...string) string {
	t.Helper()
	return Run(t, pcapPath, append([]string{"-V"}, extraArgs...)...)
}

// Fields extracts the named display-filter fields (-T fields -e ...) and
// returns one row per packet, with one string per field in the order given
// (empty when the packet lacks the field; repeated fields are joined with
// ","). extraArgs may add e.g. a -Y display filter.
func Fields(t testing.TB, pcapPath string, fields []string, extraArgs ...string) [][]string {
	t.Helper()
	args := []string{"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out := Run(t, pcapPath, append(args, extraArgs...)...)
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" && len(fields) > 1 {
			continue
		}
		row := strings.Split(line, "\t")
		for len(row) < len(fields) {
			row = append(row, "")
		}
		rows = append(rows, row)
	}
	return rows
}

// severityError is Wireshark's PI_ERROR expert severity.
const severityError = 0x00800000

// Problems returns a description of every packet that Wireshark reports as
// malformed (a _ws.malformed item, "[Malformed Packet]" in the Info
// column) or that carries an expert item of severity error. An empty
// result means the capture decodes cleanly.
func Problems(t testing.TB, pcapPath string, extraArgs ...string) []string {
	t.Helper()
	rows := Fields(t, pcapPath, []string{
		"frame.number", "_ws.malformed", "_ws.expert.severity", "_ws.expert.message", "_ws.col.Info",
	}, extraArgs...)
	var bad []string
	for _, r := range rows {
		errs, resent := 0, 0
		msgs := strings.Split(r[3], ",")
		for i, s := range strings.Split(r[2], ",") {
			if v, err := strconv.ParseUint(s, 0, 32); err == nil && v >= severityError {
				if i < len(msgs) && TCPResentOverlap(r[4], msgs[i]) {
					resent++
				} else {
					errs++
				}
			}
		}
		// _ws.malformed is also set by error items of the Malformed
		// group, a resent segment's reassembly overlap among them; a
		// dissector exception shows "Malformed" in Info.
		isBad := errs > 0 || strings.Contains(r[4], "Malformed") || (r[1] != "" && resent == 0)
		if isBad {
			bad = append(bad, "frame "+r[0]+": "+r[4]+" ("+r[3]+")")
		}
	}
	return bad
}

// tcpResent matches the Info column of a frame Wireshark's TCP analysis
// marks as carrying bytes sent before: a retransmission (on a loaded
// machine loopback TCP's tail loss probe or RTO resends a segment whose
// ACK is late) or a segment another overtook.
var tcpResent = regexp.MustCompile(`\[TCP (Out-Of-Order|Retransmission|Spurious Retransmission|Fast Retransmission)\]`)

// TCPResentOverlap reports whether an expert message on a frame whose
// Info column is info is TCP reassembly meeting bytes it already has, in
// a segment TCP sent again: the same bytes twice, not a decoding error.
// Different bytes at the same sequence numbers are another message
// ("overlapping with different data") and stay errors.
func TCPResentOverlap(info, msg string) bool {
	return msg == "New fragment overlaps old data (retransmission?)" && tcpResent.MatchString(info)
}

// CheckNoMalformed fails the test if Problems reports anything.
func CheckNoMalformed(t testing.TB, pcapPath string, extraArgs ...string) {
	t.Helper()
	for _, p := range Problems(t, pcapPath, extraArgs...) {
		t.Errorf("tshark: %s", p)
	}
}

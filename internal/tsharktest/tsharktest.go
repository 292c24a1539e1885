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
		isBad := r[1] != "" || strings.Contains(r[4], "Malformed")
		for _, s := range strings.Split(r[2], ",") {
			if v, err := strconv.ParseUint(s, 0, 32); err == nil && v >= severityError {
				isBad = true
			}
		}
		if isBad {
			bad = append(bad, "frame "+r[0]+": "+r[4]+" ("+r[3]+")")
		}
	}
	return bad
}

// CheckNoMalformed fails the test if Problems reports anything.
func CheckNoMalformed(t testing.TB, pcapPath string, extraArgs ...string) {
	t.Helper()
	for _, p := range Problems(t, pcapPath, extraArgs...) {
		t.Errorf("tshark: %s", p)
	}
}

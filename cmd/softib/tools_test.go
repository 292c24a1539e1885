package main

import (
	"testing"

	"softib/internal/testaddr"
	"softib/tools/pingpong"
)

func TestCLIHelpAndErrors(t *testing.T) {
	// An RDMA CM client whose server is not there is rejected (no
	// listener) and exits 1.
	noServer := testaddr.Next().String()
	for _, c := range []struct {
		run  func([]string) int
		args []string
		want int
	}{
		{runPerfDispatch, []string{"write_bw", "-h"}, 0},
		{runPerfDispatch, []string{"nosuch"}, 2},
		{runPerfDispatch, nil, 2},
		{runPerfDispatch, []string{"read_lat", "--bogus"}, 2},
		{runPerfDispatch, []string{"write_bw", "-R", "--addr", noServer, noServer}, 1},
		{runPerfDispatch, []string{"write_bw", "-A", "NOPE"}, 2},
		{func(a []string) int { return runPingpong(pingpong.RC, a) }, []string{"-m", "1000"}, 2},
		{runDevinfo, []string{"-h"}, 0},
		{runDemo, []string{"--addr-a", "bogus"}, 1},
	} {
		if got := c.run(c.args); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.args, got, c.want)
		}
	}
}

// TestCLIInputChecks: zero sizes, iterations and QP counts are refused
// (not taken for "the default"), a -q the device cannot hold fails before
// any connection, naming -q.
func TestCLIInputChecks(t *testing.T) {
	nowhere := testaddr.Next().String() // no server: a check that passes would fail later, with another message
	for _, c := range []struct {
		run  func([]string) int
		args []string
		want int
	}{
		{runPerfDispatch, []string{"write_bw", "-s", "0", nowhere}, 2},
		{runPerfDispatch, []string{"write_bw", "-n", "0", nowhere}, 2},
		{runPerfDispatch, []string{"write_bw", "-q", "0", nowhere}, 2},
		{runPerfDispatch, []string{"write_bw", "--cpu_util", nowhere}, 2}, // needs -D
		{runPerfDispatch, []string{"read_bw", "-c", "UC", nowhere}, 2},
		{runPerfDispatch, []string{"write_bw", "-c", "UD", nowhere}, 2},
		{runPerfDispatch, []string{"write_lat", "-w", "100", nowhere}, 2},
		{runPerfDispatch, []string{"write_bw", "-U", nowhere}, 2},
		{runPerfDispatch, []string{"send_lat", "--run_infinitely", nowhere}, 2},
		{runPerfDispatch, []string{"send_bw", "--run_infinitely", "-b", nowhere}, 2},
		{runPerfDispatch, []string{"write_bw", "--report-both", nowhere}, 2}, // needs -b
		{runPerfDispatch, []string{"write_lat", "-l", "4", nowhere}, 2},
		{runPerfDispatch, []string{"read_bw", "-c", "UD", nowhere}, 2},
		{runPerfDispatch, []string{"write_bw", "--addr", testaddr.Next().String(), "-q", "100000", nowhere}, 1},
		{func(a []string) int { return runPingpong(pingpong.RC, a) }, []string{"-s", "0", nowhere}, 2},
		{func(a []string) int { return runPingpong(pingpong.UD, a) }, []string{"-n", "0", nowhere}, 2},
	} {
		if got := c.run(c.args); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.args, got, c.want)
		}
	}
}

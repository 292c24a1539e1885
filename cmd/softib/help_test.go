//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runBin runs bin with args and returns exit code, stdout and stderr.
func runBin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := exec.Command(bin, args...)
	c.Stdout, c.Stderr = &out, &errb
	code := 0
	if err := c.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

// TestCLIHelpVersionAliases: help goes to stdout with exit 0 and lists
// the aliases; help TOPIC and --help show a tool's flags once each; a bad
// flag is one line with a --help hint; version; busybox symlinks.
func TestCLIHelpVersionAliases(t *testing.T) {
	bin := buildSoftib(t)
	if code, out, _ := runBin(t, bin, "help"); code != 0 || !strings.Contains(out, "ib_write_bw") || !strings.Contains(out, "ibv_rc_pingpong") {
		t.Fatalf("help: exit %d\n%s", code, out)
	}
	if code, _, errs := runBin(t, bin); code != 2 || !strings.Contains(errs, "usage: softib") {
		t.Fatalf("no command: exit %d\n%s", code, errs)
	}
	for _, topic := range []string{"write_bw", "rc_pingpong", "lst"} {
		if code, out, _ := runBin(t, bin, "help", topic); code != 0 || !strings.Contains(out, "usage: softib") {
			t.Fatalf("help %s: exit %d\n%s", topic, code, out)
		}
	}
	code, out, _ := runBin(t, bin, "perf", "write_bw", "--help")
	if code != 0 || strings.Count(out, "--size") != 1 || !strings.Contains(out, "-s, --size") {
		t.Fatalf("perf write_bw --help: exit %d\n%s", code, out)
	}
	code, out, errs := runBin(t, bin, "write_bw", "--bogus")
	if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "--help") {
		t.Fatalf("bad flag: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
	if code, out, _ := runBin(t, bin, "version"); code != 0 || !strings.HasPrefix(out, "softib ") {
		t.Fatalf("version: exit %d %q", code, out)
	}
	dir := t.TempDir()
	for _, alias := range []string{"ib_write_bw", "ibv_rc_pingpong", "lnetctl", "lst", "rping"} {
		link := filepath.Join(dir, alias)
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runBin(t, link, "--help")
		if code != 0 || !strings.Contains(out+errs, "usage: softib") {
			t.Fatalf("%s --help: exit %d\n%s%s", alias, code, out, errs)
		}
	}
}

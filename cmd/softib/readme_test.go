//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"softib/internal/testaddr"
)

// readmeBlock is a fenced code block of the README: its info string's
// words and its lines.
type readmeBlock struct {
	info  []string
	lines []string
}

// readmeBlocks returns the fenced code blocks of the README.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []readmeBlock
	var cur *readmeBlock
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			if cur != nil {
				blocks = append(blocks, *cur)
				cur = nil
			} else {
				cur = &readmeBlock{info: strings.Fields(strings.TrimPrefix(line, "```"))}
			}
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

var shComment = regexp.MustCompile(`\s+#.*$`)

// TestREADMECommands runs the README's "sh readme-test" blocks line by
// line, as a user would: `softib` is this build, each line runs in bash
// in a scratch directory, "yaml FILE" blocks are written to FILE, a
// trailing & starts a background process (one commented as a server
// must exit 0 once the next command has succeeded), and lnetd's default
// control socket is private to the test. The README's addresses and its
// accept_port are replaced by addresses and a port of this test's own.
func TestREADMECommands(t *testing.T) {
	bin := buildSoftib(t)
	work, xdg := t.TempDir(), t.TempDir()
	subst := strings.NewReplacer("127.0.0.2", testaddr.Next().String(), "127.0.0.3", testaddr.Next().String(), "7988", reservePort())
	var cmds []string
	for _, b := range readmeBlocks(t) {
		switch {
		case len(b.info) == 2 && b.info[0] == "sh" && b.info[1] == "readme-test":
			cmds = append(cmds, b.lines...)
		case len(b.info) == 2 && b.info[0] == "yaml":
			if err := os.WriteFile(filepath.Join(work, b.info[1]), []byte(subst.Replace(strings.Join(b.lines, "\n"))+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(cmds) == 0 {
		t.Fatal("README has no sh readme-test block")
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "XDG_RUNTIME_DIR="+xdg, "SOFTIB_ADDR=")
	type bgProc struct {
		line   string
		server bool
		ended  bool // its exit was checked
		cmd    *exec.Cmd
		out    *lockedBuf
		done   chan error
	}
	var bgs []*bgProc
	t.Cleanup(func() {
		for _, p := range bgs {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	for _, raw := range cmds {
		line := strings.TrimSpace(raw)
		comment := ""
		if loc := shComment.FindStringIndex(line); loc != nil {
			line, comment = strings.TrimSpace(line[:loc[0]]), line[loc[0]:]
		}
		if line == "" {
			continue
		}
		line = subst.Replace(line)
		if bg, ok := strings.CutSuffix(line, "&"); ok {
			// exec: the background process is softib itself, killed at
			// the end.
			p := &bgProc{line: raw, server: strings.Contains(comment, "server"), out: &lockedBuf{}, done: make(chan error, 1)}
			p.cmd = exec.Command("bash", "-c", "exec "+strings.TrimSpace(bg))
			p.cmd.Dir, p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = work, env, p.out, p.out
			if err := p.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { p.done <- p.cmd.Wait() }()
			bgs = append(bgs, p)
			continue
		}
		// A command right after a background start may find its server
		// not listening yet, as a user in a shell would (the README says
		// so): it is run again only while it fails for that reason and a
		// background process still runs (hang guard only); any other
		// failure fails the test at once.
		deadline := time.Now().Add(netnsGuard)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), netnsGuard)
			c := exec.CommandContext(ctx, "bash", "-c", line)
			c.Dir, c.Env = work, env
			out, err := c.CombinedOutput()
			cancel()
			if err == nil {
				t.Logf("$ %s\n%s", raw, out)
				break
			}
			running := false
			for _, p := range bgs {
				select {
				case e := <-p.done:
					p.done <- e
				default:
					running = true
				}
			}
			if !running || !serverNotReady(string(out)) || time.Now().After(deadline) {
				for _, p := range bgs {
					t.Logf("background %q:\n%s", p.line, p.out)
				}
				t.Fatalf("README command %q: %v\n%s", raw, err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The servers this command was a client of end by themselves.
		for _, p := range bgs {
			if !p.server || p.ended {
				continue
			}
			p.ended = true
			select {
			case err := <-p.done:
				p.done <- err // for the cleanup
				var ee *exec.ExitError
				if errors.As(err, &ee) || err != nil {
					t.Fatalf("README server %q: %v\n%s", p.line, err, p.out)
				}
			case <-time.After(netnsGuard):
				t.Fatalf("README server %q did not end after its client:\n%s", p.line, p.out)
			}
		}
	}
}

// serverNotReady reports whether a README client's output says only that
// its server is not listening yet: a refused TCP connection (the
// pingpongs' and perf's exchange, an LNet peer's accept_port), lnetd's
// control socket not there yet, or the RDMA CM's reject of a REQ for a
// service nobody listens on yet (rping, as librdmacm's: invalid service
// ID, reject reason 8).
func serverNotReady(out string) bool {
	return strings.Contains(out, "connect: connection refused") ||
		strings.Contains(out, "cannot reach lnetd at") ||
		strings.Contains(out, "REJECTED (status 8)")
}

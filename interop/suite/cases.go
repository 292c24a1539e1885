package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"softib/interop/vm"
)

// Iteration counts stay small: under TCG an in-guest round trip takes
// about 8 ms and retransmits are common.
const (
	pingIters = 20
	bigIters  = 5 // 64 KiB pingpong messages: 64 packets each at MTU 1024
	perfIters = 20
	udSize    = 1024 // UD messages must fit the active MTU (1024 at 1500)
	bwSize    = 4096
	tcpPort   = 18515 // rdma-core pingpong and perftest out-of-band port
	// Guest-side time limits per case kind; the host allows each case
	// hostSlack more before killing softib.
	pingLimit = 30 * time.Second
	perfLimit = 45 * time.Second
	hostSlack = 15 * time.Second
)

// testCase is one row of the suite.
type testCase struct {
	name string
	// softib is the softib subcommand path the case needs, e.g.
	// {"rc_pingpong"} or {"perf", "write_bw"}; empty for guest-only
	// harness checks.
	softib []string
	// needFlags are softib flags without which the case is skipped
	// (e.g. "R" for perftest over RDMA CM).
	needFlags []string
	// limit bounds the guest side; pingLimit when zero.
	limit time.Duration
	run   func(ctx context.Context, e *env, c *caseRun) error
}

// env is what cases share.
type env struct {
	vm   *vm.VM
	sib  *softib
	opts options
	// flagCache remembers each softib subcommand's flags.
	flagCache map[string]map[string]bool
	// notYet remembers probeNotYet's answers.
	notYet map[string]string
}

// caseRun collects one case's evidence.
type caseRun struct {
	name string
	dir  string // per-case work directory: pcap, outputs
	// limit bounds guest jobs of the case.
	limit time.Duration
	log   bytes.Buffer
	// flags are the softib subcommand's flags, when it has one.
	flags map[string]bool
	// mtu is the path MTU the case asks for; 0 for the tools' default.
	mtu int
}

func (c *caseRun) logf(format string, args ...any) {
	fmt.Fprintf(&c.log, format+"\n", args...)
}

// skipError marks a case that cannot run (yet).
type skipError struct{ why string }

func (s skipError) Error() string { return s.why }

func slug(name string) string {
	return strings.Trim(regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(name, "_"), "_")
}

func (e *env) runCase(ctx context.Context, tc *testCase) result {
	start := time.Now()
	c := &caseRun{name: tc.name, dir: filepath.Join(e.opts.work, "cases", slug(tc.name)), limit: tc.limit}
	if c.limit == 0 {
		c.limit = pingLimit
	}
	_ = os.MkdirAll(c.dir, 0o755)
	res := result{name: tc.name}
	if err := e.precheck(ctx, tc, c); err != nil {
		res.status, res.detail = "skip", err.Error()
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, c.limit+hostSlack)
	defer cancel()
	pcap := filepath.Join(c.dir, "tap.pcap")
	capt, cerr := e.vm.Capture(ctx, pcap)
	if cerr != nil {
		c.logf("capture: %v", cerr)
	}
	err := tc.run(ctx, e, c)
	if capt != nil {
		capt.Stop()
		if len(tc.softib) > 0 {
			err = e.checkCapture(c, pcap, err)
		}
	}
	res.dur = time.Since(start)
	var skip skipError
	switch {
	case errors.As(err, &skip):
		res.status, res.detail = "skip", skip.why
	case err != nil:
		res.status, res.detail = "FAIL", err.Error()
		c.logf("FAIL: %v", err)
	default:
		res.status = "pass"
	}
	_ = os.WriteFile(filepath.Join(c.dir, "case.log"), c.log.Bytes(), 0o644)
	if res.status == "FAIL" {
		decodePcap(pcap, filepath.Join(c.dir, "tap.txt"))
	}
	if res.status == "FAIL" || e.opts.keepPcaps {
		e.saveArtifacts(c, res.status == "FAIL")
	}
	return res
}

// checkCapture adds the ICRC verdict of the case's capture to its outcome:
// a softib frame with a bad ICRC fails the case even when both tools
// finished (retransmits hid the drops), and explains a failure otherwise.
func (e *env) checkCapture(c *caseRun, pcapPath string, runErr error) error {
	var skip skipError
	if errors.As(runErr, &skip) {
		return runErr
	}
	st, err := analyzeCapture(pcapPath)
	if err != nil {
		c.logf("capture: %v", err)
		return runErr
	}
	note, verr := st.verdict(netip.MustParseAddr(e.vm.HostIP()), netip.MustParseAddr(e.vm.GuestIP()))
	c.logf("%s", note)
	switch {
	case verr == nil:
		return runErr
	case runErr == nil:
		return verr
	default:
		return fmt.Errorf("%v; %v", verr, runErr)
	}
}

// precheck skips cases whose softib subcommand or flags are missing.
func (e *env) precheck(ctx context.Context, tc *testCase, c *caseRun) error {
	if len(tc.softib) == 0 {
		return nil
	}
	if e.sib == nil || !e.sib.commands[tc.softib[0]] {
		return skipError{"skip: softib lacks " + tc.softib[0]}
	}
	key := strings.Join(tc.softib, " ")
	if e.flagCache == nil {
		e.flagCache = map[string]map[string]bool{}
	}
	fl, ok := e.flagCache[key]
	if !ok {
		var help string
		fl, help = e.sib.flags(ctx, tc.softib...)
		if len(tc.softib) > 1 && regexp.MustCompile(`(?i)unknown|unsupported|not supported`).MatchString(help) {
			fl = nil
		}
		e.flagCache[key] = fl
	}
	if fl == nil {
		return skipError{"skip: softib lacks " + key}
	}
	for _, f := range tc.needFlags {
		if !fl[f] {
			return skipError{fmt.Sprintf("skip: softib %s lacks -%s", key, f)}
		}
		if why := e.probeNotYet(ctx, tc.softib, f); why != "" {
			return skipError{"skip: softib lacks it: " + why}
		}
	}
	c.flags = fl
	return nil
}

// probeNotYet asks softib once per command and flag whether the mode is
// there: a tool that has the flag but refuses it ("not yet available")
// does so at once, before any I/O. A tool that accepts it tries to reach a
// peer that is not listening and is stopped after a few seconds. It
// returns softib's refusal, or "" when the mode looks available.
func (e *env) probeNotYet(ctx context.Context, cmd []string, flag string) string {
	key := cmd[0] + " -" + flag
	if e.notYet == nil {
		e.notYet = map[string]string{}
	}
	if why, ok := e.notYet[key]; ok {
		return why
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	args := append(append([]string{}, cmd...), "-"+flag, "--addr", e.vm.HostIP(), e.vm.GuestIP())
	out, _ := e.vm.Command(pctx, e.sib.path, args...).CombinedOutput()
	why := ""
	if m := notYetRE.FindStringSubmatch(string(out)); m != nil {
		why = strings.TrimSpace(m[1])
	}
	e.notYet[key] = why
	return why
}

// saveArtifacts copies a case's pcap and logs to the artefact directory.
func (e *env) saveArtifacts(c *caseRun, failed bool) {
	dst := filepath.Join(e.opts.artifacts, slug(c.name))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return
	}
	entries, _ := os.ReadDir(c.dir)
	for _, ent := range entries {
		if !failed && !strings.HasSuffix(ent.Name(), ".pcap") {
			continue
		}
		_ = copyFile(filepath.Join(c.dir, ent.Name()), filepath.Join(dst, ent.Name()))
	}
}

// decodePcap writes tshark's one-line-per-frame decode of a failed case's
// capture next to it, so CI artefacts can be read without Wireshark.
func decodePcap(pcap, out string) {
	if _, err := exec.LookPath("tshark"); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, "tshark", "-n", "-r", pcap, "-c", "5000").CombinedOutput()
	if err != nil && len(b) == 0 {
		return
	}
	_ = os.WriteFile(out, b, 0o644)
}

// side says who runs the server.
type side int

const (
	rxeServer side = iota
	softibServer
)

func (s side) String() string {
	if s == rxeServer {
		return "srv=rxe"
	}
	return "srv=softib"
}

// pairSpec is one Linux tool paired with one softib tool.
type pairSpec struct {
	server side
	// guest is the rdma-core/perftest command line (server or client
	// form already chosen).
	guest string
	// host is the softib argument list (after the binary).
	host []string
	// port is the TCP port the server listens on before the client may
	// start; 0 means wait for an RDMA CM listener instead.
	port int
	// check inspects both outputs after both sides exited 0.
	check func(guest, host string) error
}

// runPair runs a server and a client, one in the guest and one softib on
// the host, and requires both to succeed.
func (e *env) runPair(ctx context.Context, c *caseRun, p pairSpec) error {
	guestLimit := c.limit
	hostOut := filepath.Join(c.dir, "softib.out")
	hf, err := os.Create(hostOut)
	if err != nil {
		return err
	}
	defer hf.Close()
	hostCmd := e.vm.Command(ctx, e.sib.path, p.host...)
	hostCmd.Stdout, hostCmd.Stderr = hf, hf
	c.logf("guest: %s", p.guest)
	c.logf("host:  softib %s", strings.Join(p.host, " "))

	var job *vm.Job
	exited := make(chan error, 1)
	if p.server == rxeServer {
		script := fmt.Sprintf("%s &\npid=$!\n%s\nwait $pid\n", p.guest, readyWait(p.port))
		if job, err = e.vm.Go(c.name, script, guestLimit); err != nil {
			return err
		}
		if err := job.WaitMarker(ctx, "ready"); err != nil {
			r, _ := job.Wait(ctx)
			return fmt.Errorf("rxe server did not start: %v: %s", err, lastLines(r.Stderr+r.Stdout, 3))
		}
		if err := hostCmd.Start(); err != nil {
			job.Kill()
			return err
		}
		go func() { exited <- hostCmd.Wait() }()
	} else {
		if err := hostCmd.Start(); err != nil {
			return err
		}
		go func() { exited <- hostCmd.Wait() }()
		if err := waitHostServer(ctx, hostCmd.Process.Pid, p.port, exited); err != nil {
			_ = hostCmd.Process.Kill()
			<-exited
			text := readFile(hostOut)
			return e.softibFailure(fmt.Errorf("softib server did not start: %v: %s", err, lastLines(text, 2)), text)
		}
		if job, err = e.vm.Go(c.name, p.guest, guestLimit); err != nil {
			_ = hostCmd.Process.Kill()
			return err
		}
	}

	// Wait for both sides. When one fails, the other cannot succeed: end
	// it after a short grace instead of waiting for its timeout.
	var r vm.Result
	var werr, hostErr error
	jobDone := make(chan struct{})
	go func() { r, werr = job.Wait(ctx); close(jobDone) }()
	const grace = 3 * time.Second
	hostFailed := false
	select {
	case hostErr = <-exited:
		if hostErr != nil {
			hostFailed = true
			t := time.AfterFunc(grace, job.Kill)
			<-jobDone
			t.Stop()
		} else {
			<-jobDone
		}
	case <-jobDone:
		if werr != nil || r.Code != 0 {
			t := time.AfterFunc(grace, func() { _ = hostCmd.Process.Kill() })
			hostErr = <-exited
			t.Stop()
		} else {
			hostErr = <-exited
		}
	}
	_ = os.WriteFile(filepath.Join(c.dir, "guest.out"), []byte(r.Stdout), 0o644)
	_ = os.WriteFile(filepath.Join(c.dir, "guest.err"), []byte(r.Stderr), 0o644)
	hostText := readFile(hostOut)
	c.logf("guest rc %d after %v; host: %v", r.Code, r.Elapsed, errOrOK(hostErr))
	switch {
	case hostFailed:
		// softib failed first; the rxe side's status is a consequence.
		return e.softibFailure(fmt.Errorf("softib: %v: %s; rxe side exit %d", hostErr, lastLines(hostText, 2), r.Code), hostText)
	case werr != nil:
		return fmt.Errorf("guest job: %v", werr)
	case r.TimedOut():
		return fmt.Errorf("rxe side timed out; softib: %v: %s", errOrOK(hostErr), lastLines(hostText, 2))
	case r.Code != 0:
		return fmt.Errorf("rxe side exit %d: %s; softib: %v", r.Code, lastLines(r.Stderr+r.Stdout, 2), errOrOK(hostErr))
	case hostErr != nil:
		return e.softibFailure(fmt.Errorf("softib: %v: %s", hostErr, lastLines(hostText, 2)), hostText)
	}
	if p.check != nil {
		return p.check(r.Stdout+r.Stderr, hostText)
	}
	return nil
}

// notYetRE matches how softib tools refuse a mode they do not have yet
// (e.g. "-R: RDMA CM mode not yet available in softib").
var notYetRE = regexp.MustCompile(`(?m)^(.*not yet (available|implemented|supported).*)$`)

// softibFailure turns a softib failure into a skip when softib said the
// feature is not there yet: such a case "lacks" softib support like a
// missing subcommand does.
func (e *env) softibFailure(err error, hostText string) error {
	if m := notYetRE.FindStringSubmatch(hostText); m != nil {
		return skipError{"skip: softib lacks it: " + strings.TrimSpace(m[1])}
	}
	return err
}

// readyWait renders the guest shell that marks the server job ready.
func readyWait(port int) string {
	if port > 0 {
		return fmt.Sprintf("wait_listen %d $pid", port)
	}
	// RDMA CM listeners show up in the rdma tool's cm_id table, with the
	// owner's pid: match this server's own listener, not one a previous
	// case's server may still hold while it exits (a stale match let a
	// client connect too early and get REJ "invalid service ID").
	return `while kill -0 $pid 2>/dev/null; do
	if rdma res show cm_id 2>/dev/null | grep LISTEN | grep -qw "pid $pid"; then mark ready; break; fi
	nap 0.1
done`
}

// waitHostServer waits until the softib server listens: on TCP port port,
// or (port 0) with its RoCE UDP socket bound.
func waitHostServer(ctx context.Context, pid, port int, exited chan error) error {
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("exited early (%v)", errOrOK(err))
		default:
		}
		ok := false
		if port > 0 {
			ok = vm.TCPListening(pid, port)
		} else {
			ok = vm.UDPBound(pid, 4791)
		}
		if ok {
			if port == 0 {
				// Nothing shows an RDMA CM listener from outside;
				// give it a moment past binding its socket.
				time.Sleep(500 * time.Millisecond)
			}
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("exited early (%v)", errOrOK(err))
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return errors.New("not listening after 30 s")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

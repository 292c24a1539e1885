package vm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// tcpListen is the /proc/net/tcp state code of a listening socket.
const tcpListen = "0A"

// SocketOn reports whether the table in r (the /proc/net/{tcp,udp}[6]
// format) has a socket on local port port; with listen set only sockets in
// LISTEN state count (for TCP).
func SocketOn(r io.Reader, port int, listen bool) bool {
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[0] == "sl" {
			continue
		}
		if !strings.HasSuffix(f[1], want) {
			continue
		}
		if !listen || f[3] == tcpListen {
			return true
		}
	}
	return false
}

// procSocketOn checks the socket tables seen by process pid, i.e. those of
// its network namespace.
func procSocketOn(pid, port int, proto string, listen bool) bool {
	for _, t := range []string{proto, proto + "6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, t))
		if err != nil {
			continue
		}
		if SocketOn(bytes.NewReader(b), port, listen) {
			return true
		}
	}
	return false
}

// TCPListening reports whether a TCP socket listens on port in the network
// namespace of process pid.
func TCPListening(pid, port int) bool { return procSocketOn(pid, port, "tcp", true) }

// UDPBound reports whether a UDP socket is bound to port in the network
// namespace of process pid.
func UDPBound(pid, port int) bool { return procSocketOn(pid, port, "udp", false) }

// Capture is a running tcpdump on the VM's tap. It asks the kernel for a
// large capture buffer and reports what the kernel still dropped: an RDMA
// WRITE of 1 MiB is a burst of a thousand frames, which overruns
// tcpdump's default 2 MiB buffer on a loaded machine, and a check of
// "every frame" must know whether it saw every frame.
type Capture struct {
	// Path is the pcap file.
	Path string

	cmd    *exec.Cmd
	done   chan struct{} // closed once tcpdump exited and its stderr is read
	once   sync.Once
	mu     sync.Mutex
	stderr strings.Builder
}

// CaptureBufferKiB is the kernel capture buffer Capture asks for (-B).
const CaptureBufferKiB = 64 << 10

// Capture starts tcpdump on the tap, writing every frame to path, and
// returns once it is capturing. Immediate mode matters: without it frames
// wait in the kernel's ring for a block timeout and those still there at
// Stop are lost.
func (v *VM) Capture(ctx context.Context, path string) (*Capture, error) {
	cmd := v.Command(context.Background(), "tcpdump", "-i", v.cfg.Tap, "--immediate-mode", "-U", "-n",
		"-s", "0", "-B", strconv.Itoa(CaptureBufferKiB), "-w", path)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Capture{Path: path, cmd: cmd, done: make(chan struct{})}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		var once sync.Once
		for sc.Scan() {
			c.mu.Lock()
			c.stderr.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			// tcpdump prints "listening on" just before its capture loop.
			if strings.Contains(sc.Text(), "listening on") {
				once.Do(func() { close(started) })
			}
		}
		close(c.done)
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
	}()
	select {
	case <-started:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("tcpdump exited: %s", c.Stderr())
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	case <-time.After(20 * time.Second):
		c.Stop()
		return nil, fmt.Errorf("tcpdump did not start: %s", c.Stderr())
	}
}

// Stderr returns what tcpdump printed so far.
func (c *Capture) Stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// Stop ends the capture (SIGINT flushes the file and prints the counts)
// and waits for tcpdump.
func (c *Capture) Stop() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}

var dropRE = regexp.MustCompile(`(?m)^(\d+) packets? dropped by (kernel|interface)`)

// Dropped stops the capture and returns the frames tcpdump reports the
// kernel (or the interface) dropped; ok is false when tcpdump printed no
// such count.
func (c *Capture) Dropped() (n int, ok bool) {
	c.Stop()
	for _, m := range dropRE.FindAllStringSubmatch(c.Stderr(), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
		ok = true
	}
	return n, ok
}

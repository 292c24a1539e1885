package vm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
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

// Capture is a running tcpdump on the VM's tap.
type Capture struct {
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
	// Path is the pcap file.
	Path string
}

// Capture starts tcpdump on the tap, writing every frame to path, and
// returns once it is capturing. Immediate mode matters: without it frames
// wait in the kernel's ring for a block timeout and those still there at
// Stop are lost.
func (v *VM) Capture(ctx context.Context, path string) (*Capture, error) {
	cmd := v.Command(context.Background(), "tcpdump", "-i", v.cfg.Tap, "--immediate-mode", "-U", "-n", "-s", "0", "-w", path)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Capture{cmd: cmd, Path: path, done: make(chan struct{})}
	started := make(chan struct{})
	var mu sync.Mutex
	var stderr strings.Builder
	go func() {
		sc := bufio.NewScanner(pr)
		var once sync.Once
		for sc.Scan() {
			mu.Lock()
			stderr.WriteString(sc.Text() + "\n")
			mu.Unlock()
			// tcpdump prints "listening on" just before its capture loop.
			if strings.Contains(sc.Text(), "listening on") {
				once.Do(func() { close(started) })
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(c.done)
	}()
	errText := func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }
	select {
	case <-started:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("tcpdump exited: %s", errText())
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	case <-time.After(20 * time.Second):
		c.Stop()
		return nil, fmt.Errorf("tcpdump did not start: %s", errText())
	}
}

// Stop ends the capture (SIGINT flushes the file) and waits for tcpdump.
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

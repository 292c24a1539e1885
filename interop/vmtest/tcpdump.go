package vmtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"softib/interop/vm"
)

// Capture is a tcpdump on the VM's tap with a large kernel buffer. Unlike
// vm.(*VM).Capture it reports how many frames the kernel dropped: an RDMA
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

// StartCapture starts tcpdump on v's tap writing every frame to path and
// returns once it is capturing.
func StartCapture(ctx context.Context, v *vm.VM, path string) (*Capture, error) {
	cmd := v.Command(context.Background(), "tcpdump", "-i", v.Tap(), "--immediate-mode", "-U", "-n",
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
		return nil, fmt.Errorf("vmtest: tcpdump exited: %s", c.Stderr())
	case <-ctx.Done():
		c.Stop()
		return nil, ctx.Err()
	case <-time.After(20 * time.Second):
		c.Stop()
		return nil, fmt.Errorf("vmtest: tcpdump did not start: %s", c.Stderr())
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

// Package vm boots the interop guest (a Debian bookworm Linux with rdma_rxe,
// rdma-core and perftest, built by interop/image.sh) under QEMU TCG inside a
// private network namespace, and runs commands in it.
//
// Topology: the harness creates a network namespace holding one tap device
// (host side, default 192.168.77.1/24); QEMU runs inside that namespace and
// the guest's eth0 (default 192.168.77.2/24) is the other end of the tap.
// The namespace has no route out. softib programs are started inside the
// namespace with [VM.Command] and bind to the tap address.
//
// Commands reach the guest as job files in a 9p share that the guest init
// (interop/guest/init) polls: see [VM.Go]. Jobs run concurrently, each
// under a timeout enforced inside the guest.
package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one VM. The zero value of every field but Image selects
// a default.
type Config struct {
	// Image is the directory made by interop/image.sh: vmlinuz,
	// initrd.img and rootfs.ext4. The root image is opened with
	// snapshot=on, so guest writes never reach it.
	Image string
	// WorkDir holds the 9p job share and the console log; a fresh
	// temporary directory when empty. It is not removed by Stop, so logs
	// survive for artefacts.
	WorkDir string
	// Namespace is the network namespace name; "sibiop-<pid>" by default.
	Namespace string
	// Tap is the tap device name inside the namespace; "sibtap0" by default.
	Tap string
	// HostAddr is the tap address on the host side; 192.168.77.1/24.
	HostAddr netip.Prefix
	// GuestAddr is the guest's eth0 address; 192.168.77.2/24.
	GuestAddr netip.Prefix
	// MTU of the tap and of the guest's eth0; 1500 by default. rxe derives
	// the active IB MTU from it (1024 at 1500, 4096 needs 9000).
	MTU int
	// MemoryMB is the guest RAM; 1024 by default.
	MemoryMB int
	// CPUs is the guest vCPU count; 2 by default.
	CPUs int
	// BootTimeout bounds boot up to a ready rxe0; 5 minutes by default
	// (TCG on a loaded 2-core machine is slow).
	BootTimeout time.Duration
	// QEMU is the emulator binary; qemu-system-x86_64 by default.
	QEMU string
	// Log receives progress lines; discarded when nil.
	Log io.Writer
}

func (c *Config) setDefaults() {
	if c.Namespace == "" {
		c.Namespace = fmt.Sprintf("sibiop-%d", os.Getpid())
	}
	if c.Tap == "" {
		c.Tap = "sibtap0"
	}
	if !c.HostAddr.IsValid() {
		c.HostAddr = netip.MustParsePrefix("192.168.77.1/24")
	}
	if !c.GuestAddr.IsValid() {
		c.GuestAddr = netip.MustParsePrefix("192.168.77.2/24")
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = 1024
	}
	if c.CPUs == 0 {
		c.CPUs = 2
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = 5 * time.Minute
	}
	if c.QEMU == "" {
		c.QEMU = "qemu-system-x86_64"
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// ErrExited reports that QEMU is no longer running.
var ErrExited = errors.New("vm: qemu exited")

// VM is a running guest.
type VM struct {
	cfg     Config
	share   string
	console string
	qemu    *exec.Cmd
	exited  chan struct{}
	exitErr error
	seq     atomic.Uint64

	// BootTime is the time from starting QEMU to a ready rxe0.
	BootTime time.Duration
	// Ready is what the guest init reported when ready: port state,
	// uptime, kernel version and ibv_devinfo output.
	Ready string

	stopOnce sync.Once
}

// Start creates the namespace and tap, boots the guest and waits until its
// rxe0 is ready. On error everything it created is torn down again.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	cfg.setDefaults()
	for _, f := range []string{"vmlinuz", "initrd.img", "rootfs.ext4"} {
		if _, err := os.Stat(filepath.Join(cfg.Image, f)); err != nil {
			return nil, fmt.Errorf("vm: image incomplete: %w", err)
		}
	}
	if cfg.WorkDir == "" {
		d, err := os.MkdirTemp("", "softib-vm-")
		if err != nil {
			return nil, err
		}
		cfg.WorkDir = d
	}
	v := &VM{
		cfg:     cfg,
		share:   filepath.Join(cfg.WorkDir, "share"),
		console: filepath.Join(cfg.WorkDir, "console.log"),
		exited:  make(chan struct{}),
	}
	if err := os.MkdirAll(v.share, 0o755); err != nil {
		return nil, err
	}
	if err := v.setupNetns(ctx); err != nil {
		v.teardownNetns()
		return nil, err
	}
	if err := v.boot(ctx); err != nil {
		v.Stop()
		return nil, err
	}
	return v, nil
}

// Config returns the effective configuration (defaults filled in).
func (v *VM) Config() Config { return v.cfg }

// Namespace returns the network namespace the VM's tap lives in.
func (v *VM) Namespace() string { return v.cfg.Namespace }

// Tap returns the tap device name inside the namespace.
func (v *VM) Tap() string { return v.cfg.Tap }

// HostIP is the host side address of the tap.
func (v *VM) HostIP() string { return v.cfg.HostAddr.Addr().String() }

// GuestIP is the guest's eth0 address.
func (v *VM) GuestIP() string { return v.cfg.GuestAddr.Addr().String() }

// ConsoleLog is the path of the guest's serial console log.
func (v *VM) ConsoleLog() string { return v.console }

// ShareDir is the host directory shared with the guest as /mnt/jobs; job
// outputs stay there.
func (v *VM) ShareDir() string { return v.share }

func (v *VM) logf(format string, args ...any) {
	fmt.Fprintf(v.cfg.Log, "vm: "+format+"\n", args...)
}

func runCmd(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (v *VM) setupNetns(ctx context.Context) error {
	ns, tap := v.cfg.Namespace, v.cfg.Tap
	// A namespace of the same name is left over from a crashed run of
	// this very process id: reuse would mix state, so remove it.
	_ = exec.Command("ip", "netns", "del", ns).Run()
	steps := [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "tuntap", "add", "dev", tap, "mode", "tap"},
		{"-n", ns, "link", "set", tap, "mtu", fmt.Sprint(v.cfg.MTU)},
		{"-n", ns, "addr", "add", v.cfg.HostAddr.String(), "dev", tap},
		{"-n", ns, "link", "set", tap, "up"},
	}
	for _, s := range steps {
		if err := runCmd(ctx, "ip", s...); err != nil {
			return err
		}
	}
	return nil
}

func (v *VM) teardownNetns() {
	_ = exec.Command("ip", "netns", "del", v.cfg.Namespace).Run()
}

func (v *VM) boot(ctx context.Context) error {
	img := v.cfg.Image
	appendLine := strings.Join([]string{
		"root=/dev/vda", "rw", "rootfstype=ext4", "console=ttyS0", "loglevel=4",
		"init=/sbin/softib-init", "net.ifnames=0", "panic=-1",
		"softib.ip=" + v.cfg.GuestAddr.String(),
		"softib.mtu=" + fmt.Sprint(v.cfg.MTU),
	}, " ")
	args := []string{
		"netns", "exec", v.cfg.Namespace, v.cfg.QEMU,
		"-name", "softib-interop",
		"-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max",
		"-smp", fmt.Sprint(v.cfg.CPUs), "-m", fmt.Sprint(v.cfg.MemoryMB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "file:" + v.console,
		"-kernel", filepath.Join(img, "vmlinuz"),
		"-initrd", filepath.Join(img, "initrd.img"),
		"-append", appendLine,
		"-drive", "file=" + filepath.Join(img, "rootfs.ext4") + ",format=raw,if=virtio,snapshot=on,cache=unsafe",
		"-netdev", "tap,id=n0,ifname=" + v.cfg.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02",
		"-virtfs", "local,path=" + v.share + ",mount_tag=jobs,security_model=none,id=jobs",
		"-device", "virtio-rng-pci",
	}
	qlog, err := os.Create(filepath.Join(v.cfg.WorkDir, "qemu.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = qlog, qlog
	start := time.Now()
	if err := cmd.Start(); err != nil {
		qlog.Close()
		return err
	}
	v.qemu = cmd
	go func() {
		v.exitErr = cmd.Wait()
		qlog.Close()
		close(v.exited)
	}()
	v.logf("qemu pid %d booting (namespace %s, mtu %d)", cmd.Process.Pid, v.cfg.Namespace, v.cfg.MTU)

	ctx, cancel := context.WithTimeout(ctx, v.cfg.BootTimeout)
	defer cancel()
	ready := filepath.Join(v.share, "ready")
	for {
		if b, err := os.ReadFile(ready); err == nil {
			v.BootTime = time.Since(start)
			v.Ready = string(b)
			if !strings.Contains(v.Ready, "ACTIVE") {
				return fmt.Errorf("vm: rxe0 not active after boot:\n%s", v.Ready)
			}
			v.logf("ready after %v", v.BootTime.Round(100*time.Millisecond))
			return nil
		}
		select {
		case <-v.exited:
			return fmt.Errorf("%w during boot (%v); console tail:\n%s", ErrExited, v.exitErr, v.ConsoleTail(30))
		case <-ctx.Done():
			return fmt.Errorf("vm: boot: %w; console tail:\n%s", ctx.Err(), v.ConsoleTail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ConsoleTail returns the last n lines of the serial console log.
func (v *VM) ConsoleTail(n int) string {
	b, _ := os.ReadFile(v.console)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Exited is closed when QEMU has exited.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// Stop powers the guest off (forcefully after a grace period), then removes
// the namespace. It is safe to call more than once.
func (v *VM) Stop() {
	v.stopOnce.Do(func() {
		if v.qemu != nil && v.qemu.Process != nil {
			_ = os.WriteFile(filepath.Join(v.share, "poweroff"), nil, 0o644)
			select {
			case <-v.exited:
			case <-time.After(15 * time.Second):
				_ = v.qemu.Process.Kill()
				// ip netns exec execs qemu, so this pid is qemu itself.
				<-v.exited
			}
		}
		v.teardownNetns()
	})
}

// Command returns a command that runs name inside the VM's network
// namespace (via ip netns exec, which execs it, so the process id is the
// program's own).
func (v *VM) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", v.cfg.Namespace, name}, args...)...)
}

// SetMTU sets the MTU of both ends of the tap (host tap, guest eth0) and
// waits until rxe0 reports the matching active MTU (rxe follows netdev MTU
// changes: 1500 gives 1024, 9000 gives 4096).
func (v *VM) SetMTU(ctx context.Context, mtu int) error {
	if err := runCmd(ctx, "ip", "-n", v.cfg.Namespace, "link", "set", v.cfg.Tap, "mtu", fmt.Sprint(mtu)); err != nil {
		return err
	}
	want := ActiveMTU(mtu)
	script := fmt.Sprintf(`ip link set eth0 mtu %d || exit 1
for i in $(seq 1 100); do
	ibv_devinfo -d rxe0 | grep -q "active_mtu:.*%d" && exit 0
	nap 0.1
done
ibv_devinfo -d rxe0 >&2
exit 1
`, mtu, want)
	r, err := v.Run(ctx, fmt.Sprintf("mtu%d", mtu), script, 30*time.Second)
	if err != nil {
		return err
	}
	if r.Code != 0 {
		return fmt.Errorf("vm: guest MTU %d: rxe0 active MTU is not %d: %s", mtu, want, strings.TrimSpace(r.Stderr))
	}
	return nil
}

// ActiveMTU is the IB MTU rxe derives from a netdev MTU: the largest of
// 256..4096 that fits after rxe's 80 bytes of header allowance.
func ActiveMTU(netdevMTU int) int {
	best := 0
	for m := 256; m <= 4096; m *= 2 {
		if m <= netdevMTU-80 {
			best = m
		}
	}
	return best
}

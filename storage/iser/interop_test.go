package iser

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"softib/interop/vmtest"
	"softib/rdmacm"
	"softib/storage/scsi"
)

// TestInteropLinuxISER serves a file LUN to the Linux 6.1 iSER initiator
// (open-iscsi + ib_iser over rdma_rxe in the QEMU guest): SendTargets
// discovery over TCP, login over iSER, mkfs.ext4 + mount + a checksummed
// file set, fio --verify=crc32c random read/write at 4 KiB and 128 KiB
// with queue depth 16, logout and login again with the files checked,
// then the target torn down in the middle of fio and restarted: the
// initiator must recover or fail the I/O, and the file set must still
// match its checksums. It runs when SOFTIB_INTEROP_IMAGE names an image
// from interop/image.sh (scripts/interop.sh).
func TestInteropLinuxISER(t *testing.T) {
	ctx, v := vmtest.Boot(t, "iSER interop", "sibiser", 12*time.Minute)
	if v == nil {
		return
	}
	host := netip.MustParseAddr(v.HostIP())
	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	m := rdmacm.NewManager(rdmacm.Config{})
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	st := scsi.NewTarget()
	defer st.Close()
	b, err := scsi.OpenFile(filepath.Join(t.TempDir(), "lun0"), 256<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddLUN(0, b, scsi.LUNConfig{MaxTransfer: maxBurst, Name: "interop"}); err != nil {
		t.Fatal(err)
	}
	const iqn = "iqn.2026-11.org.softib:interop"
	start := func() (stop func()) {
		// The host address lives in the VM's network namespace, so the
		// TCP discovery listener is opened there.
		tgt, err := NewTarget(Config{IQN: iqn, Addr: netip.AddrPortFrom(host, DefaultPort), Logf: t.Logf}, m, st)
		if err != nil {
			t.Fatal(err)
		}
		if err := listenInNetns(v.Namespace(), tgt.Listen); err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { tgt.Serve(sctx); close(done) }()
		return func() { cancel(); tgt.Close(); <-done }
	}
	stop := start()
	defer func() { stop() }()

	portal := fmt.Sprintf("%s:%d", host, DefaultPort)
	node := fmt.Sprintf("iscsiadm -m node -T %s -p %s", iqn, portal)
	run := func(label, script string, timeout time.Duration) string {
		t.Helper()
		r, err := v.Run(ctx, label, script, timeout)
		if err != nil || r.Code != 0 {
			t.Fatalf("%s: %v rc %d (SCSI commands %d, check conditions %d)\n%s\n%s", label, err, r.Code,
				st.Stats.Commands.Load(), st.Stats.CheckConditions.Load(), r.Stdout, r.Stderr)
		}
		t.Logf("%s (%v):\n%s", label, r.Elapsed, r.Stdout)
		return r.Stdout
	}
	// The disk is the block device of LUN 0 of the iSCSI session (no
	// udev in the guest: devtmpfs names it).
	findDisk := `disk() { for i in $(seq 100); do for d in /sys/class/iscsi_session/session*/device/target*/*:0/block/*; do [ -e "$d" ] && { echo /dev/${d##*/}; return 0; }; done; nap 0.2; done; return 1; }`
	fioJob := func(bs string, secs int) string {
		return fmt.Sprintf("fio --name=v%s --filename=/mnt/t/fio-%s --size=32M --rw=randrw --bs=%s --iodepth=16 --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --runtime=%d --output-format=terse --terse-version=3 | cut -d';' -f3-9,48-50", bs, bs, bs, secs)
	}
	run("iSER login, mkfs, files, fio", fmt.Sprintf(`set -e
%s
modprobe -a ib_iser sd_mod
mkdir -p /etc/iscsi /mnt/t /run/lock/iscsi /var/lib/iscsi
echo InitiatorName=iqn.2026-11.org.softib:guest >/etc/iscsi/initiatorname.iscsi
pgrep -x iscsid >/dev/null || iscsid
iscsiadm -m discovery -t st -p %s
%s -o update -n iface.transport_name -v iser
%s -o update -n node.session.timeo.replacement_timeout -v 20
%s --login
d=$(disk) || { dmesg | tail -40; find /sys/class/iscsi_session/session*/device/ | head -40; exit 1; }
echo "disk $d: $(cat /sys/block/${d#/dev/}/size) sectors, $(cat /sys/block/${d#/dev/}/device/vendor)"
sg_inq -p 0x83 $d | head -5 || true
mkfs.ext4 -q -F $d
mount $d /mnt/t
for i in 1 2 3 4 5 6; do head -c $((i*1024*1024+i*777)) /dev/urandom >/mnt/t/f$i; done
(cd /mnt/t && sha256sum f*) >/root/sums
umount /mnt/t
echo 3 >/proc/sys/vm/drop_caches
mount $d /mnt/t
(cd /mnt/t && sha256sum -c /root/sums)
%s
%s
`, findDisk, portal, node, node, node, fioJob("4k", 25), fioJob("128k", 25)), 4*time.Minute)

	run("logout, login, files checked", fmt.Sprintf(`set -e
%s
umount /mnt/t
%s --logout
%s --login
d=$(disk)
mount $d /mnt/t
(cd /mnt/t && sha256sum -c /root/sums)
`, findDisk, node, node), 2*time.Minute)

	// Kill the target in the middle of fio, restart it: the initiator
	// reconnects (replacement_timeout 20 s) or fails the I/O; fio must
	// never see data that fails verification.
	job, err := v.Go("fio across a target restart", `mark started
fio --name=restart --filename=/mnt/t/fio-restart --size=32M --rw=randrw --bs=16k --iodepth=16 --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --runtime=40 --time_based --output-format=terse --terse-version=3 >/tmp/fio.out 2>&1
echo "fio rc $?"
cut -d';' -f3-9 /tmp/fio.out | head -3
grep -i -E 'verify|bad|crc' /tmp/fio.out && echo CORRUPTION
true
`, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := job.WaitMarker(ctx, "started"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second)
	t.Logf("tearing the target down mid-I/O")
	stop()
	time.Sleep(3 * time.Second)
	stop = start()
	t.Logf("target restarted")
	r, err := job.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fio across the restart:\n%s%s", r.Stdout, r.Stderr)
	if strings.Contains(r.Stdout, "CORRUPTION") {
		t.Fatal("fio saw data that failed verification")
	}
	out := run("files after the restart", fmt.Sprintf(`set -e
for i in $(seq 150); do iscsiadm -m session -P 3 | grep -q 'iSCSI Session State: LOGGED_IN' && break; nap 0.2; done
iscsiadm -m session -P 3 | grep -E 'Session State|Connection State' || true
(cd /mnt/t && sha256sum -c /root/sums)
umount /mnt/t
%s --logout
`, node), 2*time.Minute)
	if strings.Count(out, ": OK") != 6 {
		t.Fatalf("file set after restart:\n%s", out)
	}
}

// listenInNetns runs listen (which opens the TCP discovery socket) on a
// thread switched into the guest's network namespace, where the host
// address lives; the socket stays there.
func listenInNetns(ns string, listen func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- err
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		err = listen()
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

//go:build linux

// Package storage_test proves softib's block storage targets with the
// Linux initiators in the interop guest, in one boot: the iSER target
// (storage/iser) with open-iscsi + ib_iser, then the SRP target
// (storage/srp) with ib_srp over the RDMA CM (and ib_srp's IB CM login,
// which cannot work on RoCE: it needs an SA path record). It runs when
// SOFTIB_INTEROP_IMAGE names an image from interop/image.sh
// (scripts/interop.sh).
package storage_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/cm"
	"softib/internal/netns"
	"softib/interop/vm"
	"softib/interop/vmtest"
	"softib/rdmacm"
	"softib/storage/iser"
	"softib/storage/scsi"
	"softib/storage/srp"
	"softib/wire/mad"
)

// TestInteropLinuxStorage boots the guest once and runs both targets
// against the Linux 6.1 initiators; each subtest makes ext4 on its disk,
// checks a file set by checksum, runs fio --verify=crc32c randrw at 4 KiB
// and 128 KiB with queue depth 16, logs out and in again (SRP: deletes
// and adds the target port), and tears the target down in the middle of
// fio and restarts it: the initiator must recover or fail the I/O, never
// see data that fails verification, and the file set must still match.
func TestInteropLinuxStorage(t *testing.T) {
	ctx, v := vmtest.Boot(t, "block storage interop", "sibstor", 20*time.Minute)
	if v == nil {
		return
	}
	host := netip.MustParseAddr(v.HostIP())
	dev := vmtest.OpenDevice(t, v.Namespace(), host)
	// The device's IB CM, for the SRP target's IB CM listener and DM
	// agent.
	var hostCM *cm.CM
	m := rdmacm.NewManager(rdmacm.Config{CM: cm.Config{Attached: func(c *cm.CM, _ *cm.GSI) { hostCM = c }}})
	defer m.Close()
	if err := m.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	t.Run("iSER", func(t *testing.T) { testISER(ctx, t, v, m, host) })
	t.Run("SRP", func(t *testing.T) { testSRP(ctx, t, v, m, hostCM, host) })
}

// testISER: SendTargets discovery over TCP, login over iSER.
func testISER(ctx context.Context, t *testing.T, v *vm.VM, m *rdmacm.Manager, host netip.Addr) {
	st := fileLUN(t, "lun0")
	defer st.Close()
	const iqn = "iqn.2026-11.org.softib:interop"
	start := starter(ctx, t, func() (target, error) {
		return iser.NewTarget(iser.Config{IQN: iqn, Addr: netip.AddrPortFrom(host, iser.DefaultPort), Logf: t.Logf}, m, st)
	}, func(tgt target) error {
		// The host address lives in the VM's network namespace, so the
		// TCP discovery listener is opened there.
		return netns.Run(v.Namespace(), tgt.Listen) // the TCP discovery socket, where the host address lives
	})
	stop := start()
	defer func() { stop() }()

	portal := fmt.Sprintf("%s:%d", host, iser.DefaultPort)
	node := fmt.Sprintf("iscsiadm -m node -T %s -p %s", iqn, portal)
	run := runner(ctx, t, v, st)
	// The disk is the block device of LUN 0 of the iSCSI session (no
	// udev in the guest: devtmpfs names it).
	findDisk := `disk() { for i in $(seq 100); do for d in /sys/class/iscsi_session/session*/device/target*/*:0/block/*; do [ -e "$d" ] && { echo /dev/${d##*/}; return 0; }; done; nap 0.2; done; return 1; }`
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
%s
%s
%s
`, findDisk, portal, node, node, node, filesMade, fioJob("4k", 25, "3-9,48-50"), fioJob("128k", 25, "3-9,48-50")), 4*time.Minute)

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
	restartDuringFIO(ctx, t, v, &stop, start)
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

// testSRP: ib_srp add_target with dest=IP:PORT (login over the RDMA CM).
// The target listens on the IB CM too; ib_srp's IB CM login (dgid=,
// service_id=) must fail on the RoCE port without a REQ reaching it.
func testSRP(ctx context.Context, t *testing.T, v *vm.VM, m *rdmacm.Manager, hostCM *cm.CM, host netip.Addr) {
	st := fileLUN(t, "srp-lun0")
	defer st.Close()
	var cur *srp.Target
	start := starter(ctx, t, func() (target, error) {
		tgt, err := srp.NewTarget(srp.Config{Addr: netip.AddrPortFrom(host, srp.DefaultPort), Logf: t.Logf}, m, st)
		cur = tgt
		return tgt, err
	}, func(tgt target) error {
		if err := tgt.Listen(); err != nil {
			return err
		}
		return tgt.(*srp.Target).ListenIBCM(hostCM)
	})
	stop := start()
	defer func() { stop() }()

	run := runner(ctx, t, v, st)
	gid := host.As16()
	ibGUID := srp.DefaultGUID(host)
	reqs := hostCM.Stats().Received[mad.AttrREQ].Load()
	ibOut := run("ib_srp IB CM login (fails on RoCE)", fmt.Sprintf(`modprobe -a ib_srp sd_mod
if echo id_ext=%016x,ioc_guid=%016x,dgid=%x,pkey=ffff,service_id=%016x >/sys/class/infiniband_srp/srp-rxe0-1/add_target 2>/tmp/ib.err; then echo LOGGED-IN; else echo "refused: $(cat /tmp/ib.err)"; fi
dmesg | grep -i srp | tail -5 || true
`, ibGUID, ibGUID, gid[:], cur.ServiceID()), time.Minute)
	if strings.Contains(ibOut, "LOGGED-IN") || !strings.Contains(ibOut, "refused") {
		t.Fatalf("ib_srp's IB CM login on RoCE: %s", ibOut)
	}
	if n := hostCM.Stats().Received[mad.AttrREQ].Load() - reqs; n != 0 {
		t.Fatalf("ib_srp's IB CM login sent %d REQ(s); the path lookup should have failed first", n)
	}
	// ib_srp removes a deleted target port's channels asynchronously and
	// refuses the same target with EEXIST until it is gone: add_target
	// waits for that.
	// id_ext and ioc_guid name the target port: the target's defaults.
	guid := srp.DefaultGUID(host)
	add := fmt.Sprintf(`for i in $(seq 100); do echo id_ext=%016x,ioc_guid=%016x,dest=%s:%d 2>/tmp/add.err >/sys/class/infiniband_srp/srp-rxe0-1/add_target && break; grep -q 'File exists' /tmp/add.err || { cat /tmp/add.err; exit 1; }; nap 0.1; done`, guid, guid, host, srp.DefaultPort)
	disk := `disk() { for i in $(seq 150); do for d in /sys/block/sd*; do [ -e $d/device/vendor ] && grep -q SOFTIB $d/device/vendor && { echo /dev/${d##*/}; return 0; }; done; nap 0.2; done; return 1; }`
	run("SRP login, mkfs, files, fio", fmt.Sprintf(`set -e
%s
modprobe -a ib_srp sd_mod
mkdir -p /mnt/t
ls /sys/class/infiniband_srp/
%s
d=$(disk) || { dmesg | tail -30; exit 1; }
echo "disk $d: $(cat /sys/block/${d#/dev/}/size) sectors"
%s
%s
%s
`, disk, add, filesMade, fioJob("4k", 25, "3-9"), fioJob("128k", 25, "3-9")), 4*time.Minute)

	run("port delete, add, files checked", fmt.Sprintf(`set -e
%s
umount /mnt/t
for p in /sys/class/srp_remote_ports/port-*; do echo 1 >$p/delete; done
for i in $(seq 100); do ls /sys/class/srp_remote_ports/ | grep -q port || break; nap 0.1; done
%s
d=$(disk)
mount $d /mnt/t
(cd /mnt/t && sha256sum -c /root/sums)
`, disk, add), 2*time.Minute)

	restartDuringFIO(ctx, t, v, &stop, start)
	out := run("files after the restart", `set -e
for i in $(seq 150); do [ "$(cat /sys/class/srp_remote_ports/port-*/state 2>/dev/null)" = running ] && break; nap 0.2; done
cat /sys/class/srp_remote_ports/port-*/state
(cd /mnt/t && sha256sum -c /root/sums)
umount /mnt/t
for p in /sys/class/srp_remote_ports/port-*; do echo 1 >$p/delete; done
`, 2*time.Minute)
	if strings.Count(out, ": OK") != 6 {
		t.Fatalf("file set after restart:\n%s", out)
	}
}

// target is an iSER or SRP target.
type target interface {
	Listen() error
	Serve(ctx context.Context) error
	Close() error
}

// fileLUN returns a SCSI target core with LUN 0 on a 256 MiB file.
func fileLUN(t *testing.T, name string) *scsi.Target {
	st := scsi.NewTarget()
	b, err := scsi.OpenFile(filepath.Join(t.TempDir(), name), 256<<20, false)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	if _, err := st.AddLUN(0, b, scsi.LUNConfig{MaxTransfer: 512 << 10, Name: "interop"}); err != nil {
		st.Close()
		t.Fatal(err)
	}
	return st
}

// starter returns a function that makes a target with mk, listens with
// listen and serves it until the stop function it returns.
func starter(ctx context.Context, t *testing.T, mk func() (target, error), listen func(target) error) func() (stop func()) {
	return func() (stop func()) {
		tgt, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		if err := listen(tgt); err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { tgt.Serve(sctx); close(done) }()
		return func() { cancel(); tgt.Close(); <-done }
	}
}

// runner returns a function that runs a script in the guest and fails
// the test (with st's counters) unless it exits 0.
func runner(ctx context.Context, t *testing.T, v *vm.VM, st *scsi.Target) func(label, script string, timeout time.Duration) string {
	return func(label, script string, timeout time.Duration) string {
		t.Helper()
		r, err := v.Run(ctx, label, script, timeout)
		if err != nil || r.Code != 0 {
			t.Fatalf("%s: %v rc %d (SCSI commands %d, check conditions %d)\n%s\n%s", label, err, r.Code,
				st.Stats.Commands.Load(), st.Stats.CheckConditions.Load(), r.Stdout, r.Stderr)
		}
		t.Logf("%s (%v):\n%s", label, r.Elapsed, r.Stdout)
		return r.Stdout
	}
}

// filesMade makes ext4 on $d, writes a file set, and checks it by
// checksum after dropping the page cache.
const filesMade = `mkfs.ext4 -q -F $d
mount $d /mnt/t
for i in 1 2 3 4 5 6; do head -c $((i*1024*1024+i*777)) /dev/urandom >/mnt/t/f$i; done
(cd /mnt/t && sha256sum f*) >/root/sums
umount /mnt/t
echo 3 >/proc/sys/vm/drop_caches
mount $d /mnt/t
(cd /mnt/t && sha256sum -c /root/sums)`

// fioJob is a verifying fio randrw run of secs seconds at block size bs,
// queue depth 16, printing the terse output's fields.
func fioJob(bs string, secs int, fields string) string {
	return fmt.Sprintf("fio --name=v%s --filename=/mnt/t/fio-%s --size=32M --rw=randrw --bs=%s --iodepth=16 --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --runtime=%d --output-format=terse --terse-version=3 | cut -d';' -f%s", bs, bs, bs, secs, fields)
}

// restartDuringFIO tears the target down (stop) in the middle of a
// verifying fio run on /mnt/t and starts it again; fio must never see
// data that fails verification. *stop stops the target running now,
// the new one once it started (so the caller's deferred stop always
// stops the right one).
func restartDuringFIO(ctx context.Context, t *testing.T, v *vm.VM, stop *func(), start func() (stop func())) {
	t.Helper()
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
	(*stop)()
	time.Sleep(3 * time.Second)
	*stop = start()
	t.Logf("target restarted")
	r, err := job.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fio across the restart:\n%s%s", r.Stdout, r.Stderr)
	if strings.Contains(r.Stdout, "CORRUPTION") {
		t.Fatal("fio saw data that failed verification")
	}
}

package srp

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"softib/interop/vmtest"
	"softib/rdmacm"
	"softib/storage/scsi"
)

// TestInteropLinuxSRP serves a file LUN to the Linux 6.1 SRP initiator
// (ib_srp over rdma_rxe in the QEMU guest, add_target with dest=IP:PORT,
// so the login goes over the RDMA CM): mkfs.ext4 + mount + a checksummed
// file set, fio --verify=crc32c randrw at 4 KiB and 128 KiB with queue
// depth 16, the target port deleted and added again with the files
// checked, then the target torn down in the middle of fio and restarted:
// ib_srp must reconnect or fail the I/O, and the files must still match.
// It runs when SOFTIB_INTEROP_IMAGE names an image from interop/image.sh
// (scripts/interop.sh).
func TestInteropLinuxSRP(t *testing.T) {
	ctx, v := vmtest.Boot(t, "SRP interop", "sibsrp", 12*time.Minute)
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
	if _, err := st.AddLUN(0, b, scsi.LUNConfig{MaxTransfer: maxXfer, Name: "interop"}); err != nil {
		t.Fatal(err)
	}
	start := func() (stop func()) {
		tgt, err := NewTarget(Config{Addr: netip.AddrPortFrom(host, DefaultPort), Logf: t.Logf}, m, st)
		if err != nil {
			t.Fatal(err)
		}
		if err := tgt.Listen(); err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { tgt.Serve(sctx); close(done) }()
		return func() { cancel(); tgt.Close(); <-done }
	}
	stop := start()
	defer func() { stop() }()

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
	// ib_srp removes a deleted target port's channels asynchronously and
	// refuses the same target with EEXIST until it is gone: add_target
	// waits for that.
	add := fmt.Sprintf(`for i in $(seq 100); do echo id_ext=0002c90300000001,ioc_guid=0002c90300000001,dest=%s:%d 2>/tmp/add.err >/sys/class/infiniband_srp/srp-rxe0-1/add_target && break; grep -q 'File exists' /tmp/add.err || { cat /tmp/add.err; exit 1; }; nap 0.1; done`, host, DefaultPort)
	disk := `disk() { for i in $(seq 150); do for d in /sys/block/sd*; do [ -e $d/device/vendor ] && grep -q SOFTIB $d/device/vendor && { echo /dev/${d##*/}; return 0; }; done; nap 0.2; done; return 1; }`
	fioJob := func(bs string, secs int) string {
		return fmt.Sprintf("fio --name=v%s --filename=/mnt/t/fio-%s --size=32M --rw=randrw --bs=%s --iodepth=16 --ioengine=libaio --direct=1 --verify=crc32c --verify_fatal=1 --runtime=%d --output-format=terse --terse-version=3 | cut -d';' -f3-9", bs, bs, bs, secs)
	}
	run("SRP login, mkfs, files, fio", fmt.Sprintf(`set -e
%s
modprobe -a ib_srp sd_mod
mkdir -p /mnt/t
ls /sys/class/infiniband_srp/
%s
d=$(disk) || { dmesg | tail -30; exit 1; }
echo "disk $d: $(cat /sys/block/${d#/dev/}/size) sectors"
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
`, disk, add, fioJob("4k", 25), fioJob("128k", 25)), 4*time.Minute)

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

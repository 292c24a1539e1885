package targetcmd

import (
	"bytes"
	"context"
	"flag"
	"net/netip"
	"strings"
	"testing"

	"softib/rdmacm"
	"softib/storage/scsi"
)

// TestUsageErrors runs the checks every target command shares; none of
// these cases gets as far as opening a device.
func TestUsageErrors(t *testing.T) {
	cmd := Command{
		Name:  "test-target",
		Usage: "usage: test-target --addr IP --lun SPEC",
		Port:  1,
		Flags: func(fs *flag.FlagSet) { fs.Int("own", 0, "a command's own flag") },
		New: func(netip.AddrPort, *rdmacm.Manager, *scsi.Target, func(string, ...any)) (Target, error) {
			t.Fatal("a usage error reached New")
			return nil, nil
		},
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: test-target"},
		{[]string{"--addr", "127.0.0.1"}, 2, "usage"},
		{[]string{"--lun", "mem:1M"}, 2, "usage"},
		{[]string{"--addr", "127.0.0.1", "--lun", "mem:1M", "extra"}, 2, "-own"},
		{[]string{"--addr", "127.0.0.1", "--lun", "mem:1M", "--port", "65536"}, 2, "usage"},
		{[]string{"--addr", "127.0.0.1", "--lun", "mem:1M", "--bogus"}, 2, "bogus"},
		{[]string{"--addr", "nope", "--lun", "mem:1M"}, 2, "test-target: --addr"},
		{[]string{"--addr", "127.0.0.1", "--lun", "disk:/x"}, 1, "kind"},
		{[]string{"--addr", "127.0.0.1", "--lun", "file:/nonexistent/x"}, 1, "no such file"},
		{[]string{"--addr", "127.0.0.1", "--lun", "mem:1M", "--lun", "mem:1M,ro"}, 1, "unknown option"},
	} {
		var out bytes.Buffer
		if code := cmd.Run(context.Background(), tc.args, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: code %d, want %d; output %q lacks %q", tc.args, code, tc.code, out.String(), tc.want)
		}
	}
}

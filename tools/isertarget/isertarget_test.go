package isertarget

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"--addr", "127.0.0.1"}, 2, "usage"},
		{[]string{"--lun", "mem:1M"}, 2, "usage"},
		{[]string{"--addr", "nope", "--lun", "mem:1M"}, 2, "--addr"},
		{[]string{"--addr", "127.0.0.1", "--lun", "disk:/x"}, 1, "kind"},
		{[]string{"--addr", "127.0.0.1", "--lun", "file:/nonexistent/x"}, 1, "no such file"},
		{[]string{"--addr", "127.0.0.1", "--lun", "mem:1M,ro"}, 1, "unknown option"},
	} {
		var out bytes.Buffer
		if code := Run(context.Background(), tc.args, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: code %d, want %d; output %q lacks %q", tc.args, code, tc.code, out.String(), tc.want)
		}
	}
}

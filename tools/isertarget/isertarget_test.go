package isertarget

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUsage checks the command's own flags and names; the checks all
// target commands share are targetcmd's.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if code := Run(context.Background(), nil, &out); code != 2 {
		t.Fatalf("code %d, want 2", code)
	}
	for _, want := range []string{"usage: softib iser-target", "-iqn", "-window", "-no-discovery", "3260", "log connections"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage %q lacks %q", out.String(), want)
		}
	}
	out.Reset()
	if code := Run(context.Background(), []string{"--addr", "nope", "--lun", "mem:1M"}, &out); code != 2 || !strings.Contains(out.String(), "iser-target: --addr") {
		t.Errorf("bad --addr: code %d, output %q", code, out.String())
	}
}

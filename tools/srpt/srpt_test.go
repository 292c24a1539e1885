package srpt

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
	for _, want := range []string{"usage: softib srpt", "[--port 5555]", "-credits", "log channels"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage %q lacks %q", out.String(), want)
		}
	}
	out.Reset()
	if code := Run(context.Background(), []string{"--addr", "127.0.0.1", "--lun", "file:/nonexistent/x"}, &out); code != 1 || !strings.Contains(out.String(), "srpt: ") {
		t.Errorf("missing LUN file: code %d, output %q", code, out.String())
	}
}

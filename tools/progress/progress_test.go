package progress_test

import (
	"bytes"
	"testing"
	"time"

	"softib/tools/progress"
)

func TestLine(t *testing.T) {
	if got, want := progress.Line(1, 4, 8, "write_bw 8 B", 1500*time.Millisecond), "[==>     ]  25%   1.5s write_bw 8 B"; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
	if got := progress.Line(4, 4, 4, "done", 0); got != "[====] 100%   0.0s done" {
		t.Errorf("full line %q", got)
	}
}

func TestPlain(t *testing.T) {
	var b bytes.Buffer
	bar := progress.New(&b, 2) // a buffer is not a terminal
	bar.Start("a")
	bar.Step("a")
	bar.Start("b")
	bar.Step("b")
	bar.Finish()
	if got := b.String(); got != "[1/2] a\n[2/2] b\n" {
		t.Errorf("plain output %q", got)
	}
	if progress.IsTerminal(&b) {
		t.Error("buffer is a terminal")
	}
}

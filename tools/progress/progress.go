// Package progress draws a one-line progress bar on a terminal, or prints
// plain progress lines when the output is not a terminal (logs, CI).
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Bar tracks progress through Total steps.
type Bar struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	total int
	done  int
	start time.Time
	width int
	drawn bool
}

// New returns a bar writing to w for total steps; it draws in place when
// w is a terminal.
func New(w io.Writer, total int) *Bar {
	return &Bar{w: w, tty: IsTerminal(w), total: max(total, 1), start: time.Now(), width: 30}
}

// NewPlain returns a bar that prints plain lines whatever w is.
func NewPlain(w io.Writer, total int) *Bar {
	b := New(w, total)
	b.tty = false
	return b
}

// Start announces the step that begins now (label) without counting it.
func (b *Bar) Start(label string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tty {
		b.draw(label)
		return
	}
	fmt.Fprintf(b.w, "[%d/%d] %s\n", b.done+1, b.total, label)
}

// Step counts one finished step.
func (b *Bar) Step(label string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = min(b.done+1, b.total)
	if b.tty {
		b.draw(label)
	}
}

// Line formats the bar for done of total steps.
func Line(done, total, width int, label string, elapsed time.Duration) string {
	total = max(total, 1)
	fill := done * width / total
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	return fmt.Sprintf("[%s] %3d%% %5.1fs %s", bar, done*100/total, elapsed.Seconds(), label)
}

func (b *Bar) draw(label string) {
	fmt.Fprintf(b.w, "\r\x1b[K%s", Line(b.done, b.total, b.width, label, time.Since(b.start)))
	b.drawn = true
}

// Finish ends the bar's line on a terminal.
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tty && b.drawn {
		fmt.Fprint(b.w, "\r\x1b[K")
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"softib/tools/devsel"
)

// exitInterrupted is the exit code of a tool stopped by SIGINT or SIGTERM
// (128 + SIGINT, as a shell reports it).
const exitInterrupted = 130

// toolContext returns a context cancelled by SIGINT/SIGTERM.
func toolContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// parseTool parses a tool's flags, flags and positional arguments mixed.
// It returns the positional arguments, or the exit code when parsing
// ended the run (-h: 0, bad flags: 2).
func parseTool(fs *flag.FlagSet, args []string, usage string) ([]string, int, bool) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: softib %s\n\nflags:\n", usage)
		fs.PrintDefaults()
	}
	pos, err := devsel.ParseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, 0, false
	}
	if err != nil {
		return nil, 2, false
	}
	return pos, 0, true
}

// fail prints a tool error and returns exit code 1.
func fail(name string, err error) int {
	fmt.Fprintf(os.Stderr, "softib %s: %v\n", name, err)
	return 1
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

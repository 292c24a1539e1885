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
	"reflect"
	"sort"
	"strings"
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
// ended the run: -h/--help prints the usage on stdout and exits 0; a bad
// flag prints one line and a --help hint on stderr and exits 2.
func parseTool(fs *flag.FlagSet, args []string, usage string) ([]string, int, bool) {
	name := fs.Name()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	pos, err := devsel.ParseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stdout, "usage: softib %s\n\nflags:\n", usage)
		printFlags(os.Stdout, fs)
		return nil, 0, false
	}
	if err != nil {
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
			msg = "unknown flag -" + f
		}
		fmt.Fprintf(os.Stderr, "softib %s: %s (run 'softib %s --help' for the flags)\n", name, msg, name)
		return nil, 2, false
	}
	return pos, 0, true
}

// printFlags lists fs's flags once each: aliases that set the same
// variable (-s and --size) share one entry, short names first.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	type entry struct {
		names []string
		f     *flag.Flag
	}
	var entries []*entry
	byValue := map[flag.Value]*entry{}
	fs.VisitAll(func(f *flag.Flag) {
		var key flag.Value
		if isComparablePtr(f.Value) {
			key = f.Value
		}
		if e, ok := byValue[key]; ok && key != nil && e.f.Usage == f.Usage {
			e.names = append(e.names, f.Name)
			return
		}
		e := &entry{names: []string{f.Name}, f: f}
		entries = append(entries, e)
		if key != nil {
			byValue[key] = e
		}
	})
	for _, e := range entries {
		sort.SliceStable(e.names, func(i, j int) bool { return len(e.names[i]) < len(e.names[j]) })
		var b strings.Builder
		for i, n := range e.names {
			if i > 0 {
				b.WriteString(", ")
			}
			if len(n) == 1 {
				b.WriteString("-" + n)
			} else {
				b.WriteString("--" + n)
			}
		}
		arg, use := flag.UnquoteUsage(e.f)
		if arg != "" {
			b.WriteString(" " + arg)
		}
		fmt.Fprintf(w, "  %s\n    \t%s", b.String(), strings.ReplaceAll(use, "\n", "\n    \t"))
		if d := e.f.DefValue; d != "" && d != "0" && d != "false" && !strings.Contains(use, "default") {
			fmt.Fprintf(w, " (default %s)", d)
		}
		fmt.Fprintln(w)
	}
}

// isComparablePtr reports whether v can key a map (the flag package's
// values are pointers; a custom one may not be comparable).
func isComparablePtr(v flag.Value) bool {
	return v != nil && reflect.TypeOf(v).Comparable() && reflect.TypeOf(v).Kind() == reflect.Pointer
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

// Command softib is the single CLI of the softib RDMA and LNet stack:
// device information, pingpong and perftest-style tools, rping, the LNet
// daemon and its lnetctl-style control, LNet selftest and the demo.
//
// Each subcommand lives in its own file and registers itself in init, so
// tools are added without touching this file.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"softib/tools/devsel"
)

// command is one softib subcommand.
type command struct {
	name    string
	summary string
	// run executes the subcommand with the arguments after its name and
	// returns the process exit code.
	run func(args []string) int
}

var commands = map[string]*command{}

// register adds a subcommand; called from init functions.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("softib: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// usage lists the commands on w.
func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: softib <command> [flags]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "  %-14s %s\n", "help [command]", "this list, or a command's flags")
	fmt.Fprintf(w, "  %-14s %s\n", "version", "softib's version and build")
	fmt.Fprintf(w, "\nAliases: the rdma-core, perftest and Lustre names run the same tool, as\n"+
		"'softib NAME' or through a symlink named NAME (busybox style):\n  %s\n", strings.Join(aliasNames(), " "))
	fmt.Fprintf(w, "\nRun 'softib help <command>' or 'softib <command> --help' for a command's flags.\n")
}

// aliasNames are the tool names of rdma-core, perftest and Lustre that
// resolve to a softib command (lookup strips ibv_/ib_).
func aliasNames() []string {
	var names []string
	for n := range commands {
		switch {
		case n == "rc_pingpong" || n == "ud_pingpong" || n == "devinfo":
			names = append(names, "ibv_"+n)
		case strings.HasSuffix(n, "_bw") || strings.HasSuffix(n, "_lat"):
			names = append(names, "ib_"+n)
		case n == "lnetctl" || n == "lst" || n == "rping" || n == "mckey":
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// lookup finds a command by its name or an alias (ibv_rc_pingpong,
// ib_write_bw).
func lookup(name string) (*command, bool) {
	if c, ok := commands[name]; ok {
		return c, true
	}
	c, ok := commands[strings.TrimPrefix(strings.TrimPrefix(name, "ibv_"), "ib_")]
	return c, ok
}

// version prints the module version and the build's VCS revision.
func version() {
	v, rev, dirty := "(devel)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	fmt.Printf("softib %s", v)
	if rev != "" {
		fmt.Printf(" (%s", rev[:min(12, len(rev))])
		if dirty {
			fmt.Print(", modified")
		}
		fmt.Print(")")
	}
	fmt.Printf(" %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func main() {
	args := os.Args[1:]
	// Busybox style: a symlink named ib_write_bw, ibv_rc_pingpong,
	// lnetctl, lst, rping or mckey runs that tool.
	if base := filepath.Base(os.Args[0]); base != "softib" {
		if _, ok := lookup(base); ok {
			args = append([]string{base}, args...)
		}
	}
	if len(args) == 0 {
		usage(os.Stderr)
		os.Exit(2)
	}
	switch args[0] {
	case "-h", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			if c, ok := lookup(args[1]); ok {
				os.Exit(c.run([]string{"--help"}))
			}
			fmt.Fprintf(os.Stderr, "softib help: unknown command %q\n\n", args[1])
			usage(os.Stderr)
			os.Exit(2)
		}
		usage(os.Stdout)
		return
	case "version", "--version":
		version()
		return
	}
	name := args[0]
	c, ok := lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "softib: unknown command %q\n\n", name)
		usage(os.Stderr)
		os.Exit(2)
	}
	code := c.run(args[1:])
	// The tool's devices are closed: flush --pcap, remove the control
	// sockets, stop --metrics.
	if err := devsel.FinishObserve(); err != nil {
		fmt.Fprintf(os.Stderr, "softib %s: %v\n", name, err)
	}
	os.Exit(code)
}

// Command softib is the single CLI of the softib RDMA and LNet stack:
// device information, pingpong and perftest-style tools, rping, the LNet
// daemon and its lnetctl-style control, LNet selftest and the demo.
//
// Each subcommand lives in its own file and registers itself in init, so
// tools are added without touching this file.
package main

import (
	"fmt"
	"os"
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

func usage() {
	fmt.Fprintf(os.Stderr, "usage: softib <command> [flags]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'softib <command> -h' for a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	name := os.Args[1]
	c, ok := commands[name]
	if !ok {
		// rdma-core style names: "softib ibv_rc_pingpong" -> rc_pingpong.
		c, ok = commands[strings.TrimPrefix(strings.TrimPrefix(name, "ibv_"), "ib_")]
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "softib: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	code := c.run(os.Args[2:])
	// The tool's devices are closed: flush --pcap, remove the control
	// sockets, stop --metrics.
	if err := devsel.FinishObserve(); err != nil {
		fmt.Fprintf(os.Stderr, "softib %s: %v\n", name, err)
	}
	os.Exit(code)
}

package devsel

import (
	"flag"
	"io"
)

// ParseArgs parses args with fs like getopt_long in permute mode: flags
// may come before or after the positional arguments (the peer host of
// "softib rc_pingpong -s 64 host -n 10"). "--" ends flag parsing. It
// returns the positional arguments in order.
func ParseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag.Parse stops at "--" (consumed) or at the first non-flag.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// NewFlagSet returns a FlagSet that reports errors instead of exiting and
// writes its usage to w.
func NewFlagSet(name string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(w)
	return fs
}

package lnetd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// secondsFlag is a timeout given as Lustre's lnetctl gives it, whole or
// decimal seconds ("--timeout 5"), or as a Go duration ("5s", "500ms").
type secondsFlag time.Duration

func (s *secondsFlag) String() string { return time.Duration(*s).String() }

func (s *secondsFlag) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if f < 0 {
			return fmt.Errorf("negative timeout")
		}
		*s = secondsFlag(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want seconds (5) or a duration (5s)")
	}
	*s = secondsFlag(d)
	return nil
}

// lnetCmd is `lnetctl lnet configure|unconfigure`. LNet is up while
// lnetd runs: configure confirms it; unconfigure deletes every network
// but lo, as Lustre's unconfigure takes the NIs down (lnetd keeps
// serving, and net add or import brings networks back). configure --all,
// which configures Lustre's networks from its module parameters, has no
// counterpart here and is refused.
func (c *ctl) lnetCmd(ctx context.Context, action string, args []string) int {
	fs := c.flags("lnet " + action)
	switch action {
	case "configure":
		all := fs.Bool("all", false, "configure the networks of the module parameters (Lustre)")
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		if *all {
			return c.fail(fmt.Errorf("lnet configure --all: lnetd has no module parameters: it configures its networks from its YAML at start; add networks with `lnetctl net add` or `lnetctl import FILE`"))
		}
		// LNet is up as long as lnetd answers.
		return c.simple(ctx, "global.show", nil)
	case "unconfigure":
		if _, err := parseInterleaved(fs, args); err != nil {
			return 2
		}
		var nets map[string]any
		if err := c.call(ctx, "net.show", ShowArgs{}, &nets); err != nil {
			return c.fail(err)
		}
		code := 0
		for _, n := range exportedNets(nets) {
			if n == "lo" {
				continue
			}
			if err := c.call(ctx, "net.del", NetArgs{Net: n}, nil); err != nil {
				code = c.fail(err)
			}
		}
		return code
	}
	return c.usageErr("unknown action %q for lnet (configure, unconfigure)", action)
}

// exportedNets returns the "net type" of each net of a net show document.
func exportedNets(doc map[string]any) []string {
	var out []string
	list, _ := doc["net"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		if t, ok := m["net type"].(string); ok {
			out = append(out, strings.TrimSpace(t))
		}
	}
	return out
}

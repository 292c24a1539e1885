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

// debugCmd is `lnetctl debug recovery --local|--peer`: the NIs in
// recovery, as Lustre's lnetctl lists its recovery queues ("local NI
// recovery: nid-0: ..."). An NI is queued for recovery while its health
// value is below the maximum (1000), which net show -v and peer show -v
// report.
func (c *ctl) debugCmd(ctx context.Context, action string, args []string) int {
	if action != "recovery" {
		return c.usageErr("unknown action %q for debug (recovery --local | --peer)", action)
	}
	fs := c.flags("debug recovery")
	local := fs.Bool("local", false, "the local NIs in recovery")
	peer := fs.Bool("peer", false, "the peer NIs in recovery")
	if _, err := parseInterleaved(fs, args); err != nil {
		return 2
	}
	if *local == *peer {
		return c.usageErr("debug recovery needs --local or --peer")
	}
	op, top, list, title := "net.show", "net", "local NI(s)", "local NI recovery"
	if *peer {
		op, top, list, title = "peer.show", "peer", "peer ni", "peer NI recovery"
	}
	var doc map[string]any
	if err := c.call(ctx, op, ShowArgs{Verbose: true}, &doc); err != nil {
		return c.fail(err)
	}
	out := Map{}
	n := 0
	for _, e := range asList(doc[top]) {
		for _, ni := range asList(asMap(e)[list]) {
			m := asMap(ni)
			hv, ok := asMap(m["health stats"])["health value"].(float64)
			if nid, _ := m["nid"].(string); ok && hv < 1000 && nid != "" {
				out = out.add(fmt.Sprintf("nid-%d", n), nid)
				n++
			}
		}
	}
	c.print(Map{}.add(title, out))
	return 0
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

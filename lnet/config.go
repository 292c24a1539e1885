package lnet

import (
	"fmt"
	"strings"

	"softib/wire/lnetwire"
)

// ParseNetworks parses the lnet module's networks= syntax
// (lnet-wire.md §8.1): comma-separated nets, each with an optional
// parenthesised interface list and an optional bracketed CPT list, e.g.
// "o2ib0(ib0),tcp0(eth0,eth1)[0,1]". CPT lists are accepted for
// compatibility and ignored (softib does not partition CPUs). The result
// feeds Config.Nets or AddNet.
func ParseNetworks(s string) ([]NetConfig, error) {
	var out []NetConfig
	for _, item := range splitTop(s) {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%w: empty entry in networks %q", ErrInvalid, s)
		}
		name, rest, _ := strings.Cut(item, "(")
		var ifaces []string
		if rest != "" || strings.Contains(item, "(") {
			list, tail, ok := strings.Cut(rest, ")")
			if !ok {
				return nil, fmt.Errorf("%w: unclosed '(' in %q", ErrInvalid, item)
			}
			for _, f := range strings.Split(list, ",") {
				f = strings.TrimSpace(f)
				if f == "" {
					return nil, fmt.Errorf("%w: empty interface in %q", ErrInvalid, item)
				}
				ifaces = append(ifaces, f)
			}
			rest = strings.TrimSpace(tail)
		} else if i := strings.IndexByte(name, '['); i >= 0 {
			name, rest = name[:i], name[i:]
		}
		if rest != "" && !(strings.HasPrefix(rest, "[") && strings.HasSuffix(rest, "]")) {
			return nil, fmt.Errorf("%w: unexpected %q after net in %q", ErrInvalid, rest, item)
		}
		net, err := lnetwire.ParseNet(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		out = append(out, NetConfig{Net: net, Interfaces: ifaces})
	}
	return out, nil
}

// splitTop splits s at commas outside () and [].
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

//go:build linux

package netns

import (
	"fmt"
	"strings"
	"time"
)

// Netem describes link impairments, as tc-netem(8) does. Percentages are
// in 0..100. The zero value is an unimpaired link.
type Netem struct {
	Loss      float64       // % of packets dropped
	Duplicate float64       // % of packets sent twice
	Corrupt   float64       // % of packets with a flipped bit (netem only)
	Reorder   float64       // % of packets sent at once, ahead of the delayed rest (netem only)
	Delay     time.Duration // added one-way delay (netem only)
	Jitter    time.Duration // random ± variation of Delay (netem only)
	Limit     int           // netem queue length in packets (default 100000)
}

// netemOnly reports whether n asks for something only netem can do.
func (n Netem) netemOnly() bool {
	return n.Corrupt > 0 || n.Reorder > 0 || n.Delay > 0 || n.Jitter > 0
}

// tcArgs renders n as tc qdisc arguments.
func (n Netem) tcArgs() []string {
	limit := n.Limit
	if limit <= 0 {
		limit = 100000
	}
	args := []string{"netem", "limit", fmt.Sprint(limit)}
	delay := n.Delay
	if n.Reorder > 0 && delay == 0 {
		// netem reorders only relative to delayed packets.
		delay = time.Millisecond
	}
	if delay > 0 {
		args = append(args, "delay", fmt.Sprintf("%dus", delay.Microseconds()))
		if n.Jitter > 0 {
			args = append(args, fmt.Sprintf("%dus", n.Jitter.Microseconds()))
		}
	}
	pct := func(name string, v float64) {
		if v > 0 {
			args = append(args, name, fmt.Sprintf("%g%%", v))
		}
	}
	pct("loss", n.Loss)
	pct("duplicate", n.Duplicate)
	pct("corrupt", n.Corrupt)
	pct("reorder", n.Reorder)
	return args
}

const nftTable = "softib_netem"

// nftLoss renders loss as an nftables rule set for the namespace at the
// far end of the link: dropped on ingress there, the sender sees no
// error. (Drops in the sender's IP output hook fail the send with EPERM,
// and egress-hook drops were found not to take effect on veth on some
// kernels.)
func (n Netem) nftLoss(peerDev string) string {
	if n.Loss <= 0 {
		return ""
	}
	return fmt.Sprintf("table netdev %s {\n chain in {\n  type filter hook ingress device %q priority 0; policy accept;\n"+
		"  numgen random mod 1000000 < %d counter drop\n }\n}\n", nftTable, peerDev, ppm(n.Loss))
}

// nftDup renders duplication as nftables rule sets on the sender's IP
// output path: the copy goes straight to the destination's neighbour.
func (n Netem) nftDup(dev string) string {
	if n.Duplicate <= 0 {
		return ""
	}
	var b strings.Builder
	for _, fam := range []string{"ip", "ip6"} {
		fmt.Fprintf(&b, "table %s %s {\n chain out {\n  type filter hook output priority 0; policy accept;\n"+
			"  oifname %q numgen random mod 1000000 < %d counter dup to %s daddr device %q\n }\n}\n",
			fam, nftTable, dev, ppm(n.Duplicate), fam, dev)
	}
	return b.String()
}

// ppm converts a percentage to parts per million.
func ppm(pct float64) int { return int(pct * 10000) }

// SetNetem impairs the packets this node sends on Dev, replacing any
// earlier setting. On a relay pair (PairConfig.Relay) the relay applies
// it, whatever the kernel. Otherwise it uses a tc netem qdisc on Dev; if
// the kernel lacks netem, loss and duplication are emulated with
// nftables (needs the nft tool) and asking for more returns
// ErrNetemUnsupported. On veth, whole GSO super-packets are dropped or
// duplicated as one.
func (n *Node) SetNetem(c Netem) error {
	if n.relay != nil {
		n.relay.set(n.dir, c)
		return nil
	}
	n.clearNetem()
	if c == (Netem{}) {
		return nil
	}
	err := run(nil, "tc", append([]string{"-n", n.Name, "qdisc", "replace", "dev", n.Dev, "root"}, c.tcArgs()...)...)
	if err == nil {
		return nil
	}
	if !strings.Contains(err.Error(), "unknown") {
		return err
	}
	if c.netemOnly() {
		return fmt.Errorf("%w: %+v", ErrNetemUnsupported, c)
	}
	if r := c.nftLoss(n.peerDev); r != "" {
		if err := run([]byte(r), "ip", "netns", "exec", n.peerNS, "nft", "-f", "-"); err != nil {
			return err
		}
	}
	if r := c.nftDup(n.Dev); r != "" {
		if err := run([]byte(r), "ip", "netns", "exec", n.Name, "nft", "-f", "-"); err != nil {
			n.clearNetem()
			return err
		}
	}
	return nil
}

// ClearNetem removes any impairment set by SetNetem.
func (n *Node) ClearNetem() error {
	if n.relay != nil {
		n.relay.set(n.dir, Netem{})
		return nil
	}
	n.clearNetem()
	return nil
}

func (n *Node) clearNetem() {
	// Either may not exist; errors only mean "nothing to remove".
	_ = run(nil, "tc", "-n", n.Name, "qdisc", "del", "dev", n.Dev, "root")
	_ = run(nil, "ip", "netns", "exec", n.peerNS, "nft", "delete", "table", "netdev", nftTable)
	for _, fam := range []string{"ip", "ip6"} {
		_ = run(nil, "ip", "netns", "exec", n.Name, "nft", "delete", "table", fam, nftTable)
	}
}

package lnetd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"softib/lnet"
	"softib/lnet/lnd"
	"softib/lnet/socklnd"
	"softib/wire/lnetwire"
)

// RunLNet is `softib lnet`: today its one action is `ping NID`, which asks
// a running lnetd (when --socket is given or the default socket answers)
// or else a short-lived LNet instance of its own to ping the peer, and
// prints the peer's NIDs and round-trip times.
func RunLNet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "ping" {
		fmt.Fprintf(stderr, "usage: softib lnet ping NID [-c N] [--timeout 5] [--json] [--source NID] [--socket PATH] [--port 988]\n")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("lnet ping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	count := fs.Int("c", 1, "number of pings")
	interval := fs.Duration("i", time.Second, "interval between pings")
	timeoutV := secondsFlag(5 * time.Second)
	fs.Var(&timeoutV, "timeout", "wait for each reply: seconds (5) or a duration (5s)")
	timeout := (*time.Duration)(&timeoutV)
	asJSON := fs.Bool("json", false, "print one JSON document (replies, loss, rtt in ms) instead of the lines")
	source := fs.String("source", "", "local NID to ping from (its address must be local)")
	sock := fs.String("socket", "", "ping through the lnetd at this control socket")
	port := fs.Int("port", socklnd.DefaultAcceptPort, "the peer's acceptor port (own instance only)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: softib lnet ping NID [flags]\n\n"+
			"Pings an LNet peer: through the running lnetd when one answers on the\n"+
			"default socket or on --socket, otherwise from a short-lived LNet node.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	target, err := lnetwire.ParseNID(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "lnet ping: %q is not a NID (like 192.168.1.2@tcp): %v\n", pos[0], err)
		return 2
	}
	if *count < 1 {
		*count = 1
	}

	var pinger func(ctx context.Context) (*PingReply, error)
	var from string
	path := *sock
	if path == "" {
		path = DefaultSocketPath()
	}
	cl, derr := Dial(path)
	switch {
	case derr == nil:
		defer cl.Close()
		from = "lnetd at " + path
		pinger = func(ctx context.Context) (*PingReply, error) {
			var r PingReply
			err := cl.Call(ctx, "ping", PingArgs{NID: target.String(), Timeout: *timeout, Source: *source}, &r)
			return &r, err
		}
	case *sock != "":
		fmt.Fprintf(stderr, "lnet ping: %v\n", derr)
		return 1
	default:
		in, src, err := ownInstance(target, *source, *port)
		if err != nil {
			fmt.Fprintf(stderr, "lnet ping: %v\n", err)
			return 1
		}
		defer in.Close()
		from = src.String()
		pinger = func(ctx context.Context) (*PingReply, error) {
			res, err := in.Ping(ctx, lnetwire.ProcessID{NID: target, PID: lnetwire.PIDAny}, *timeout)
			if err != nil {
				return nil, err
			}
			return pingReplyOf(res, src), nil
		}
	}

	doc := pingJSON{Target: target.String(), From: from, Replies: []pingJSONReply{}}
	jsonOut := stdout
	if *asJSON {
		stdout = io.Discard
		defer func() {
			b, _ := json.MarshalIndent(&doc, "", "  ")
			fmt.Fprintf(jsonOut, "%s\n", b)
		}()
	}
	fmt.Fprintf(stdout, "LNET PING %s from %s\n", target, from)
	var rtts []time.Duration
	for i := range *count {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(*interval):
			}
		}
		if ctx.Err() != nil {
			break
		}
		r, err := pinger(ctx)
		doc.Sent++
		if err != nil {
			fmt.Fprintf(stdout, "no reply from %s: %v\n", target, err)
			doc.Replies = append(doc.Replies, pingJSONReply{Seq: i + 1, Error: err.Error()})
			continue
		}
		rtts = append(rtts, r.RTT)
		var nids []string
		for _, n := range r.NIDs {
			nids = append(nids, n.NID)
		}
		doc.Replies = append(doc.Replies, pingJSONReply{Seq: i + 1, PID: r.PID, Primary: r.Primary, NIDs: nids, MultiRail: r.MultiRail, RTTms: ms64(r.RTT)})
		fmt.Fprintf(stdout, "reply from %d-%s: seq=%d nids=%s multi-rail=%v rtt=%s\n",
			r.PID, r.Primary, i+1, strings.Join(nids, ","), r.MultiRail, fmtRTT(r.RTT))
	}
	fmt.Fprintf(stdout, "--- %s lnet ping statistics ---\n", target)
	loss := 100 * float64(*count-len(rtts)) / float64(*count)
	fmt.Fprintf(stdout, "%d pings sent, %d replies, %.0f%% loss\n", *count, len(rtts), loss)
	doc.Received, doc.LossPercent = len(rtts), loss
	if len(rtts) == 0 {
		return 1
	}
	lo, hi, sum := rtts[0], rtts[0], time.Duration(0)
	for _, d := range rtts {
		lo, hi, sum = min(lo, d), max(hi, d), sum+d
	}
	doc.RTTMin, doc.RTTAvg, doc.RTTMax = ms64(lo), ms64(sum/time.Duration(len(rtts))), ms64(hi)
	fmt.Fprintf(stdout, "rtt min/avg/max = %s/%s/%s ms\n", ms(lo), ms(sum/time.Duration(len(rtts))), ms(hi))
	return 0
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func fmtRTT(d time.Duration) string { return ms(d) + " ms" }

// ownInstance starts a one-NI LNet node able to reach target: the NI is
// --source, or the local address the kernel would use towards target. It
// runs no acceptor (replies come back over its own connections).
func ownInstance(target lnetwire.NID, source string, port int) (*lnet.Instance, lnetwire.NID, error) {
	if target.Net().Type() != lnetwire.SOCKLND {
		return nil, 0, fmt.Errorf("without a running lnetd only tcp NIDs can be pinged (got %s)", target.Net())
	}
	var src lnetwire.NID
	if source != "" {
		n, err := lnetwire.ParseNID(source)
		if err != nil {
			return nil, 0, fmt.Errorf("bad --source: %v", err)
		}
		if n.Net() != target.Net() {
			return nil, 0, fmt.Errorf("--source %s is not on %s", n, target.Net())
		}
		src = n
	} else {
		a := target.Addr()
		ip := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
		// A UDP "connection" sends nothing; it only asks the kernel for
		// the source address of the route to the peer.
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, uint16(port))))
		if err != nil {
			return nil, 0, fmt.Errorf("no route to %s: %v (give --source)", target, err)
		}
		la := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
		c.Close()
		b := la.As4()
		src = lnetwire.MakeNID(target.Net(), uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
	}
	a := src.Addr()
	ipStr := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}).String()
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	in, err := lnet.New(lnet.Config{
		LNDs: []lnd.LND{socklnd.New(socklnd.Config{})},
		Nets: []lnet.NetConfig{{Net: src.Net(), Addr: src.Addr(), Interfaces: []string{ipStr},
			LNDConfig: socklnd.Config{AcceptPort: port, Accept: socklnd.AcceptNone}}},
		Log: quiet,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("starting a local LNet node on %s: %v", src, err)
	}
	return in, src, nil
}

// pingJSON is `lnet ping --json`.
type pingJSON struct {
	Target      string          `json:"target"`
	From        string          `json:"from"`
	Sent        int             `json:"sent"`
	Received    int             `json:"received"`
	LossPercent float64         `json:"loss_percent"`
	RTTMin      float64         `json:"rtt_min_ms,omitempty"`
	RTTAvg      float64         `json:"rtt_avg_ms,omitempty"`
	RTTMax      float64         `json:"rtt_max_ms,omitempty"`
	Replies     []pingJSONReply `json:"replies"`
}

// pingJSONReply is one ping of pingJSON: a reply or its error.
type pingJSONReply struct {
	Seq       int      `json:"seq"`
	PID       uint32   `json:"pid,omitempty"`
	Primary   string   `json:"primary_nid,omitempty"`
	NIDs      []string `json:"nids,omitempty"`
	MultiRail bool     `json:"multi_rail,omitempty"`
	RTTms     float64  `json:"rtt_ms,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// ms64 is d in milliseconds.
func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

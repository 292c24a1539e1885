package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"softib/tools/devsel"
	"softib/tools/pingpong"
)

func init() {
	register(&command{name: "rc_pingpong", summary: "RC SEND ping-pong (ibv_rc_pingpong compatible)",
		run: func(args []string) int { return runPingpong(pingpong.RC, args) }})
	register(&command{name: "ud_pingpong", summary: "UD SEND ping-pong (ibv_ud_pingpong compatible)",
		run: func(args []string) int { return runPingpong(pingpong.UD, args) }})
}

func runPingpong(kind pingpong.Kind, args []string) int {
	name := kind.String()
	fs := devsel.NewFlagSet(name, os.Stderr)
	dev := devsel.NewOptions()
	// RoCE needs a GID, so -g defaults to the IPv4-mapped index.
	dev.Register(fs, 1, "g", "gid-idx")
	cfg, err := pingpong.RegisterFlags(fs, kind)
	if err != nil {
		return fail(name, err)
	}
	asJSON := fs.Bool("json", false, "print the result as JSON instead of the rdma-core lines")
	pos, code, ok := parseTool(fs, args, name+" [flags] [server-host]   (no host: be the server)")
	if !ok {
		return code
	}
	c, err := cfg.Finish(pos)
	if err != nil {
		fmt.Fprintf(os.Stderr, "softib %s: %v\n", name, err)
		return 2
	}
	d, err := dev.Open()
	if err != nil {
		return fail(name, err)
	}
	defer d.Close()
	c.Port, c.GIDIndex, c.PeerUDPPort, c.Out = dev.Port(), dev.GIDIndex, dev.PeerPort(), os.Stdout
	c.BindAddr = dev.BindAddr()
	ctx, cancel := toolContext()
	defer cancel()
	if *asJSON {
		c.Out = io.Discard
	}
	res, err := pingpong.Run(ctx, d, c)
	if err != nil {
		return fail(name, err)
	}
	if *asJSON {
		if err := writeJSON(os.Stdout, pingpongJSON(kind, c.Host == "", res)); err != nil {
			return fail(name, err)
		}
	}
	return 0
}

// pingpongDest is a QP address in the --json output.
type pingpongDest struct {
	LID uint16 `json:"lid"`
	QPN uint32 `json:"qpn"`
	PSN uint32 `json:"psn"`
	GID string `json:"gid"`
}

// pingpongJSON is the --json document of a pingpong run: snake_case
// names, the transport as a string.
func pingpongJSON(kind pingpong.Kind, server bool, r *pingpong.Result) any {
	dest := func(d pingpong.Dest) pingpongDest {
		return pingpongDest{LID: d.LID, QPN: d.QPN, PSN: d.PSN, GID: d.GID.Addr().String()}
	}
	return struct {
		Transport   string       `json:"transport"`
		Role        string       `json:"role"`
		Local       pingpongDest `json:"local"`
		Remote      pingpongDest `json:"remote"`
		Bytes       int64        `json:"bytes"`
		Iters       int          `json:"iterations"`
		Seconds     float64      `json:"seconds"`
		MbitPerSec  float64      `json:"mbit_per_sec"`
		UsecPerIter float64      `json:"usec_per_iter"`
	}{strings.ToUpper(kind.String()[:2]), map[bool]string{true: "server", false: "client"}[server], dest(r.Local), dest(r.Remote),
		r.Bytes, r.Iters, r.Elapsed.Seconds(), r.MbitPerSec(), r.UsecPerIter()}
}

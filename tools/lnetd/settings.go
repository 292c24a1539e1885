package lnetd

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"softib/lnet/o2iblnd"
)

// Setting is one named integer value of a config section (a tunable, a
// global). Enumerated settings (accept) are stored as their index.
type Setting struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// Settings is an ordered list of settings: the order they appear in a
// file, or the table's order when emitted.
type Settings []Setting

// Get returns the value of name and whether it is set.
func (s Settings) Get(name string) (int64, bool) {
	for _, e := range s {
		if e.Name == name {
			return e.Value, true
		}
	}
	return 0, false
}

// Set sets name to v, appending it when absent.
func (s *Settings) Set(name string, v int64) {
	for i := range *s {
		if (*s)[i].Name == name {
			(*s)[i].Value = v
			return
		}
	}
	*s = append(*s, Setting{name, v})
}

// keyDef describes one key a settings section accepts.
type keyDef struct {
	name     string
	def      int64    // default (what show and export print when unset)
	min, max int64    // accepted range
	enum     []string // names of the values 0..n-1, for enumerated keys
	ext      bool     // softib extension (not in Lustre)
	doc      string
	// check refuses values in range that softib cannot honour, with
	// the reason (nil: every value in range is honoured).
	check func(v int64) error
	// alias makes the key another name for a key of the same table: its
	// value is stored under alias (a different value for both is
	// refused), and it is never printed.
	alias string
	// local keys are lnetd's to act on, not the driver's parameters.
	local bool
}

// table is the ordered set of keys of one section.
type table []keyDef

func (t table) lookup(name string) (keyDef, bool) {
	for _, k := range t {
		if k.name == name {
			return k, true
		}
	}
	return keyDef{}, false
}

func (t table) names() []string {
	out := make([]string, len(t))
	for i, k := range t {
		out[i] = k.name
	}
	return out
}

// parse converts the text of a value of key k.
func (k keyDef) parse(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if k.enum != nil {
		if i := slices.Index(k.enum, s); i >= 0 {
			return int64(i), nil
		}
		return 0, fmt.Errorf("%q is not one of %s", s, strings.Join(k.enum, ", "))
	}
	var v int64
	switch strings.ToLower(s) {
	case "true", "yes", "on":
		v = 1
	case "false", "no", "off":
		v = 0
	default:
		var err error
		v, err = strconv.ParseInt(s, 0, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not an integer", s)
		}
	}
	if v < k.min || v > k.max {
		return 0, fmt.Errorf("%d is out of range [%d, %d]", v, k.min, k.max)
	}
	if k.check != nil {
		if err := k.check(v); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// format returns the value as emitted: the enum name or the number.
func (k keyDef) format(v int64) any {
	if k.enum != nil && v >= 0 && v < int64(len(k.enum)) {
		return k.enum[v]
	}
	return v
}

// effective returns every key of t in table order, taking values from s
// and defaults for the rest.
func (t table) effective(s Settings) Settings {
	out := make(Settings, 0, len(t))
	for _, k := range t {
		if k.alias != "" {
			continue
		}
		v, ok := s.Get(k.name)
		if !ok {
			v = k.def
		}
		out = append(out, Setting{k.name, v})
	}
	return out
}

const maxInt32 = math.MaxInt32

// globalTable lists the global section (lnetctl global show; `lnetctl set`),
// Lustre 2.15/2.16 defaults, then softib's extensions.
var globalTable = table{
	{name: "numa_range", def: 0, min: 0, max: maxInt32, doc: "NUMA distance tolerance for NI selection"},
	{name: "max_intf", def: 200, min: 16, max: maxInt32, doc: "most interfaces accepted in a ping reply"},
	{name: "discovery", def: 1, min: 0, max: 1, doc: "dynamic peer discovery"},
	{name: "drop_asym_route", def: 0, min: 0, max: 1, doc: "drop messages arriving over asymmetric routes"},
	{name: "retry_count", def: 2, min: 0, max: 128, doc: "resends of a failed message"},
	{name: "transaction_timeout", def: 150, min: 1, max: maxInt32, doc: "seconds a transaction (ping, GET) may take"},
	{name: "health_sensitivity", def: 100, min: 0, max: 1000, doc: "health decrement on a failure"},
	{name: "recovery_interval", def: 1, min: 1, max: maxInt32, doc: "seconds between NI recovery pings"},
	{name: "router_sensitivity", def: 100, min: 0, max: 100, doc: "router health sensitivity (percent)"},
	{name: "response_tracking", def: 3, min: 0, max: 3, doc: "0 none, 1 GET, 2 PUT, 3 both"},
	{name: "recovery_limit", def: 0, min: 0, max: maxInt32, doc: "seconds to keep recovering an NI (0 forever)"},
	{name: "max_recovery_ping_interval", def: 900, min: 1, max: maxInt32, doc: "cap of the recovery ping backoff"},
	{name: "router_ping_timeout", def: 50, min: 1, max: maxInt32, ext: true,
		doc: "seconds to wait for a gateway's ping reply (lnet router_ping_timeout)"},
	{name: "live_router_check_interval", def: 60, min: -1, max: maxInt32, ext: true,
		doc: "seconds between pings of an alive gateway (lnet alive_router_check_interval; <= 0 off)"},
	{name: "dead_router_check_interval", def: 60, min: 1, max: maxInt32, ext: true,
		doc: "seconds between pings of a dead gateway (lnet dead_router_check_interval)"},
	{name: "accept_port", def: 988, min: 1, max: 65535, ext: true, doc: "acceptor TCP port (lnet accept_port)"},
	{name: "accept", def: 0, min: 0, max: 2, enum: []string{"secure", "all", "none"}, ext: true,
		doc: "acceptor source-port policy (lnet accept)"},
	{name: "test_portal", def: 60, min: -1, max: 63, ext: true, doc: "portal of lnetd's echo test service (-1 off)"},
	{name: "test_slots", def: 4, min: 1, max: 64, ext: true, doc: "1 MiB echo slots of the test service"},
}

// tunablesTable is the per-NI "tunables:" section.
var tunablesTable = table{
	{name: "peer_timeout", def: 180, min: 0, max: maxInt32, doc: "seconds before a silent peer is dead (0 off)"},
	{name: "peer_credits", def: 8, min: 0, max: 16384},
	{name: "peer_buffer_credits", def: 0, min: 0, max: 16384},
	{name: "credits", def: 256, min: 0, max: 1 << 20},
}

// socklndTable is "lnd tunables:" for tcp nets (ksocklnd parameters).
var socklndTable = table{
	{name: "conns_per_peer", def: 1, min: 0, max: 127},
	{name: "accept_port", def: 0, min: 0, max: 65535, ext: true, doc: "per-NI acceptor port (0: the global one)"},
	{name: "sock_timeout", def: 50, min: 1, max: maxInt32},
	{name: "keepalive", def: 30, min: -1, max: maxInt32},
	{name: "keepalive_idle", def: 30, min: -1, max: maxInt32},
	{name: "keepalive_count", def: 5, min: 0, max: maxInt32},
	{name: "keepalive_intvl", def: 5, min: -1, max: maxInt32},
	{name: "nagle", def: 0, min: 0, max: 1},
	{name: "nconnds", def: 4, min: 1, max: 64},
	{name: "min_bulk", def: 1024, min: 0, max: 1 << 20},
	{name: "zc_min_payload", def: 16384, min: 0, max: 1 << 20},
	{name: "tx_buffer_size", def: 0, min: 0, max: 1 << 30},
	{name: "rx_buffer_size", def: 0, min: 0, max: 1 << 30},
	{name: "enable_csum", def: 0, min: 0, max: 1},
	{name: "typed_conns", def: 1, min: 0, max: 1},
	{name: "min_reconnectms", def: 1000, min: 1, max: maxInt32},
	{name: "max_reconnectms", def: 60000, min: 1, max: maxInt32},
	// Lustre 2.17's lnetctl export writes these two for every tcp NI.
	// Its "timeout" is the module's sock_timeout (ksocknal_timeout),
	// which import ignores; here it sets sock_timeout.
	{name: "timeout", def: 50, min: 1, max: maxInt32, alias: "sock_timeout"},
	{name: "tos", def: -1, min: -1, max: 255, local: true, check: func(v int64) error {
		if v != -1 {
			return fmt.Errorf("tos %d: softib's socklnd sets no IP TOS on its connections; only -1 (the system's default) can be honoured", v)
		}
		return nil
	}},
}

// o2iblndTable is "lnd tunables:" for o2ib nets (ko2iblnd parameters,
// lnet-wire.md §6.13), all of which drive lnet/o2iblnd (o2ibConfig) or
// are refused where softib cannot honour a value. Lustre 2.17's
// lnetctl export writes peercredits_hiw, map_on_demand (true),
// concurrent_sends, fmr_pool_size, fmr_flush_trigger, fmr_cache, ntx,
// conns_per_peer, timeout and tos; wrq_sge and ib_mtu are ko2iblnd module
// parameters that softib takes per NI.
var o2iblndTable = table{
	{name: "peercredits_hiw", def: 0, min: 0, max: 255},
	// Obsolete in Lustre 2.17: ko2iblnd takes any value (0 made 1) and
	// always maps on demand (kiblnd_tunables_setup); real lnet.conf files
	// still carry older releases' fragment counts (32, 256). softib takes
	// them as Lustre does and logs at NI start that the value has no
	// effect (openO2IB), rather than refusing a file Lustre loads.
	{name: "map_on_demand", def: 1, min: 0, max: 257},
	{name: "concurrent_sends", def: 0, min: 0, max: 16384},
	{name: "fmr_pool_size", def: 512, min: 0, max: 1 << 20},
	{name: "fmr_flush_trigger", def: 384, min: 0, max: 1 << 20},
	{name: "fmr_cache", def: 1, min: 0, max: 1},
	{name: "ntx", def: 512, min: 0, max: 1 << 20},
	{name: "conns_per_peer", def: 1, min: 1, max: 127},
	{name: "timeout", def: 50, min: 0, max: maxInt32},
	{name: "keepalive", def: 100, min: 0, max: maxInt32},
	{name: "wrq_sge", def: o2iblnd.DefaultWrqSGE, min: 1, max: 1 << 16, doc: "SGEs per RDMA WRITE (ko2iblnd's default 2; at most the device's max_sge)"},
	{name: "ib_mtu", def: 0, min: 0, max: 4096, check: func(v int64) error {
		switch v {
		case 0, 256, 512, 1024, 2048, 4096:
			return nil
		}
		return fmt.Errorf("ib_mtu %d: expected 0, 256, 512, 1024, 2048 or 4096", v)
	}},
	{name: "retry_count", def: 5, min: 0, max: 7},
	{name: "rnr_retry_count", def: 6, min: 0, max: 7},
	{name: "service", def: 987, min: 1, max: 65535},
	{name: "tos", def: -1, min: -1, max: 255, doc: "type of service of the connections this NI opens (-1: none)"},
}

// routingTable is the "routing:" section.
var routingTable = table{{name: "enable", def: 0, min: 0, max: 1}}

// buffersTable is the "buffers:" section (router buffer pools).
var buffersTable = table{
	{name: "tiny", def: 2048, min: 0, max: maxInt32},
	{name: "small", def: 16384, min: 0, max: maxInt32},
	{name: "large", def: 1024, min: 0, max: maxInt32},
}

// lndTable returns the "lnd tunables:" keys of a net type ("tcp", "o2ib").
func lndTable(lnd string) table {
	switch lnd {
	case "tcp":
		return socklndTable
	case "o2ib":
		return o2iblndTable
	}
	return nil
}

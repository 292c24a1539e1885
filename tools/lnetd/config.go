package lnetd

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"softib/wire/lnetwire"
)

// Config is an LNet configuration in the shape of lnetctl's import/export
// YAML (see the package documentation for the format).
type Config struct {
	Nets    []NetConfig   `json:"net,omitempty"`
	Routes  []RouteConfig `json:"route,omitempty"`
	Peers   []PeerConfig  `json:"peer,omitempty"`
	Global  Settings      `json:"global,omitempty"`
	Routing Settings      `json:"routing,omitempty"`
	Buffers Settings      `json:"buffers,omitempty"`
}

// NetConfig is one "net:" entry: a net type and its local NIs.
type NetConfig struct {
	Type string     `json:"net_type"` // "tcp", "tcp1", "o2ib", "lo"
	NIs  []NIConfig `json:"local_nis,omitempty"`
}

// NIConfig is one "local NI(s):" entry.
type NIConfig struct {
	// NID is optional: with an address it fixes the NI's NID, else the
	// NID comes from the first interface's IPv4 address.
	NID string `json:"nid,omitempty"`
	// Interfaces are OS interface names or (softib extension) IPv4
	// addresses.
	Interfaces  []string `json:"interfaces,omitempty"`
	Tunables    Settings `json:"tunables,omitempty"`
	LNDTunables Settings `json:"lnd_tunables,omitempty"`
	CPT         string   `json:"cpt,omitempty"`
}

// RouteConfig is one "route:" entry.
type RouteConfig struct {
	Net               string `json:"net"`
	Gateway           string `json:"gateway"`
	Hop               int64  `json:"hop"`
	Priority          int64  `json:"priority"`
	HealthSensitivity int64  `json:"health_sensitivity"`
}

// PeerConfig is one "peer:" entry.
type PeerConfig struct {
	PrimaryNID string   `json:"primary_nid"`
	MultiRail  bool     `json:"multi_rail"`
	NIDs       []string `json:"peer_ni,omitempty"`
}

// ConfigError is a configuration mistake, located by line and key path
// (net[0].local NI(s)[1].tunables.peer_credits).
type ConfigError struct {
	File string
	Line int
	Path string
	Msg  string
}

// ErrConfig is matched by every *ConfigError.
var ErrConfig = errors.New("lnetd: bad configuration")

// Error returns "file:line: path: message".
func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteByte(':')
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// LoadConfig reads and parses a YAML file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b)
	var ce *ConfigError
	if errors.As(err, &ce) {
		ce.File = path
	}
	return c, err
}

// ParseConfig parses lnetctl-style YAML. Unknown keys, wrong types and
// out-of-range values are errors naming the line and key path. Keys that
// `lnetctl show` prints but import ignores (status, statistics, dev cpt,
// tcp bonding, state ...) are accepted and ignored, so show output can be
// fed back.
func ParseConfig(b []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, yamlSyntaxError(err)
	}
	c := &Config{}
	if root.Kind == 0 || len(root.Content) == 0 {
		return c, nil // empty file: nothing configured
	}
	doc := root.Content[0]
	if doc.Kind == yaml.ScalarNode && doc.Tag == "!!null" {
		return c, nil
	}
	p := parser{}
	p.config(doc, c)
	if p.err != nil {
		return nil, p.err
	}
	return c, nil
}

// yamlSyntaxError turns a yaml.v3 error ("yaml: line 3: ...") into a
// ConfigError with the line.
func yamlSyntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return &ConfigError{Line: line, Msg: "YAML syntax: " + msg}
}

// parser walks the YAML node tree, keeping the first error.
type parser struct{ err error }

func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	if p.err == nil {
		line := 0
		if n != nil {
			line = n.Line
		}
		p.err = &ConfigError{Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
	}
}

// mapping iterates a mapping node's keys, rejecting keys not in known.
func (p *parser) mapping(n *yaml.Node, path string, known []string, f func(key string, v *yaml.Node, kpath string)) {
	if p.err != nil {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "lnd tunables:" with nothing under it
	}
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "expected a mapping (key: value lines), found %s", kindName(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content) && p.err == nil; i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kpath := joinPath(path, k.Value)
		if known != nil && !slices.Contains(known, k.Value) {
			p.fail(k, kpath, "unknown key %q (known here: %s)", k.Value, strings.Join(known, ", "))
			return
		}
		if seen[k.Value] {
			p.fail(k, kpath, "duplicate key %q", k.Value)
			return
		}
		seen[k.Value] = true
		f(k.Value, v, kpath)
	}
}

// sequence iterates a sequence node.
func (p *parser) sequence(n *yaml.Node, path string, f func(i int, v *yaml.Node, ipath string)) {
	if p.err != nil {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.fail(n, path, "expected a list (\"- \" items), found %s", kindName(n))
		return
	}
	for i, v := range n.Content {
		if p.err != nil {
			return
		}
		f(i, v, fmt.Sprintf("%s[%d]", path, i))
	}
}

func (p *parser) scalar(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode {
		p.fail(n, path, "expected a single value, found %s", kindName(n))
		return ""
	}
	return n.Value
}

func (p *parser) integer(n *yaml.Node, path string) int64 {
	s := p.scalar(n, path)
	if p.err != nil {
		return 0
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		p.fail(n, path, "%q is not an integer", s)
	}
	return v
}

func (p *parser) boolean(n *yaml.Node, path string) bool {
	s := p.scalar(n, path)
	switch strings.ToLower(s) {
	case "true", "yes", "1":
		return true
	case "false", "no", "0", "":
		return false
	}
	p.fail(n, path, "%q is not True or False", s)
	return false
}

func (p *parser) nid(n *yaml.Node, path string) string {
	s := p.scalar(n, path)
	if p.err != nil {
		return ""
	}
	if _, err := lnetwire.ParseNID(s); err != nil {
		p.fail(n, path, "%q is not a NID (like 192.168.1.2@tcp): %v", s, err)
	}
	return s
}

// settings parses a tunables-like section against a table.
func (p *parser) settings(n *yaml.Node, path string, t table, ignore ...string) Settings {
	var s Settings
	known := append(t.names(), ignore...)
	p.mapping(n, path, known, func(key string, v *yaml.Node, kpath string) {
		if slices.Contains(ignore, key) {
			return
		}
		k, _ := t.lookup(key)
		txt := p.scalar(v, kpath)
		if p.err != nil {
			return
		}
		val, err := k.parse(txt)
		if err != nil {
			p.fail(v, kpath, "%v", err)
			return
		}
		name := key
		if k.alias != "" {
			name = k.alias
		}
		// Only an alias can name a key twice (YAML keys are unique).
		if old, ok := s.Get(name); ok && old != val {
			p.fail(v, kpath, "%s %d and %s %d: %s is %s here, give one value", key, val, name, old, key, name)
			return
		}
		s.Set(name, val)
	})
	return s
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Section and key names, as lnetctl spells them.
const (
	keyNet         = "net"
	keyNetType     = "net type"
	keyLocalNIs    = "local NI(s)"
	keyInterfaces  = "interfaces"
	keyTunables    = "tunables"
	keyLNDTunables = "lnd tunables"
	keyPeerNI      = "peer ni"
	keyPrimaryNID  = "primary nid"
	keyMultiRail   = "Multi-Rail"
)

func (p *parser) config(n *yaml.Node, c *Config) {
	top := []string{keyNet, "route", "peer", "global", "routing", "buffers"}
	p.mapping(n, "", top, func(key string, v *yaml.Node, kpath string) {
		switch key {
		case keyNet:
			p.sequence(v, kpath, func(_ int, e *yaml.Node, ipath string) {
				c.Nets = append(c.Nets, p.net(e, ipath))
			})
		case "route":
			p.sequence(v, kpath, func(_ int, e *yaml.Node, ipath string) {
				c.Routes = append(c.Routes, p.route(e, ipath))
			})
		case "peer":
			p.sequence(v, kpath, func(_ int, e *yaml.Node, ipath string) {
				c.Peers = append(c.Peers, p.peer(e, ipath))
			})
		case "global":
			c.Global = p.settings(v, kpath, globalTable, "lnd_timeout")
		case "routing":
			c.Routing = p.settings(v, kpath, routingTable)
		case "buffers":
			c.Buffers = p.settings(v, kpath, buffersTable)
		}
	})
}

func (p *parser) net(n *yaml.Node, path string) NetConfig {
	var nc NetConfig
	var typeNode *yaml.Node
	var nisNode *yaml.Node
	var nisPath string
	p.mapping(n, path, []string{keyNetType, keyLocalNIs}, func(key string, v *yaml.Node, kpath string) {
		switch key {
		case keyNetType:
			nc.Type = p.scalar(v, kpath)
			typeNode = v
			if p.err == nil {
				if _, err := lnetwire.ParseNet(nc.Type); err != nil {
					p.fail(v, kpath, "%q is not a net (like tcp, tcp1, o2ib): %v", nc.Type, err)
				}
			}
		case keyLocalNIs:
			nisNode, nisPath = v, kpath // parsed once the type is known
		}
	})
	if p.err != nil {
		return nc
	}
	if typeNode == nil {
		p.fail(n, joinPath(path, keyNetType), "missing (every net needs \"net type: tcp\")")
		return nc
	}
	if nisNode != nil {
		lnd := lndName(nc.Type)
		p.sequence(nisNode, nisPath, func(_ int, e *yaml.Node, ipath string) {
			nc.NIs = append(nc.NIs, p.ni(e, ipath, nc.Type, lnd))
		})
	}
	return nc
}

// lndName returns the LND name of a net ("tcp1" -> "tcp").
func lndName(net string) string {
	if n, err := lnetwire.ParseNet(net); err == nil {
		return n.Type().String()
	}
	return strings.TrimRight(net, "0123456789")
}

// niIgnored are keys lnetctl show prints for an NI that import ignores.
var niIgnored = []string{"status", "statistics", "dev cpt", "tcp bonding", "sent_stats", "received_stats",
	"dropped_stats", "health stats", "health value", "lnd statistics", "tx credits"}

func (p *parser) ni(n *yaml.Node, path, net, lnd string) NIConfig {
	var ni NIConfig
	known := append([]string{"nid", keyInterfaces, keyTunables, keyLNDTunables, "CPT"}, niIgnored...)
	p.mapping(n, path, known, func(key string, v *yaml.Node, kpath string) {
		switch key {
		case "nid":
			ni.NID = p.nid(v, kpath)
			if p.err == nil {
				nid, _ := lnetwire.ParseNID(ni.NID)
				if want, _ := lnetwire.ParseNet(net); nid.Net() != want {
					p.fail(v, kpath, "NID %s is not on net %s", ni.NID, net)
				}
			}
		case keyInterfaces:
			p.interfaces(v, kpath, &ni)
		case keyTunables:
			ni.Tunables = p.settings(v, kpath, tunablesTable)
		case keyLNDTunables:
			t := lndTable(lnd)
			if t == nil {
				if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
					p.fail(v, kpath, "net type %s takes no lnd tunables", net)
				}
				return
			}
			ni.LNDTunables = p.settings(v, kpath, t)
		case "CPT":
			ni.CPT = p.scalar(v, kpath)
		}
	})
	return ni
}

// interfaces parses "interfaces: {0: eth0, 1: eth1}"; a plain list is
// accepted too.
func (p *parser) interfaces(n *yaml.Node, path string, ni *NIConfig) {
	if n.Kind == yaml.SequenceNode {
		p.sequence(n, path, func(_ int, e *yaml.Node, ipath string) {
			ni.Interfaces = append(ni.Interfaces, p.scalar(e, ipath))
		})
		return
	}
	want := 0
	p.mapping(n, path, nil, func(key string, v *yaml.Node, kpath string) {
		i, err := strconv.Atoi(key)
		if err != nil || i != want {
			p.fail(n, kpath, "interface index %q: want %d (interfaces are numbered 0, 1, ...)", key, want)
			return
		}
		want++
		s := p.scalar(v, kpath)
		if s == "" && p.err == nil {
			p.fail(v, kpath, "empty interface name")
		}
		ni.Interfaces = append(ni.Interfaces, s)
	})
}

func (p *parser) route(n *yaml.Node, path string) RouteConfig {
	r := RouteConfig{Hop: -1, HealthSensitivity: 1}
	known := []string{keyNet, "gateway", "hop", "priority", "health_sensitivity", "state", "type"}
	p.mapping(n, path, known, func(key string, v *yaml.Node, kpath string) {
		switch key {
		case keyNet:
			r.Net = p.scalar(v, kpath)
			if p.err == nil {
				if _, err := lnetwire.ParseNet(r.Net); err != nil {
					p.fail(v, kpath, "%q is not a net: %v", r.Net, err)
				}
			}
		case "gateway":
			r.Gateway = p.nid(v, kpath)
		case "hop":
			r.Hop = p.integer(v, kpath)
			if p.err == nil && (r.Hop < -1 || r.Hop == 0 || r.Hop > 255) {
				p.fail(v, kpath, "hop %d out of range (1..255, or -1 for default)", r.Hop)
			}
		case "priority":
			r.Priority = p.integer(v, kpath)
			if p.err == nil && r.Priority < 0 {
				p.fail(v, kpath, "priority must be >= 0 (0 is the highest)")
			}
		case "health_sensitivity":
			r.HealthSensitivity = p.integer(v, kpath)
		}
	})
	if p.err == nil && (r.Net == "" || r.Gateway == "") {
		p.fail(n, path, "a route needs both net and gateway")
	}
	return r
}

func (p *parser) peer(n *yaml.Node, path string) PeerConfig {
	var pc PeerConfig
	known := []string{keyPrimaryNID, keyMultiRail, keyPeerNI, "peer state"}
	p.mapping(n, path, known, func(key string, v *yaml.Node, kpath string) {
		switch key {
		case keyPrimaryNID:
			pc.PrimaryNID = p.nid(v, kpath)
		case keyMultiRail:
			pc.MultiRail = p.boolean(v, kpath)
		case keyPeerNI:
			p.sequence(v, kpath, func(_ int, e *yaml.Node, ipath string) {
				peerNIKnown := []string{"nid", "state", "max_ni_tx_credits", "available_tx_credits",
					"min_tx_credits", "tx_q_num_of_buf", "available_rtr_credits", "min_rtr_credits",
					"refcount", "statistics", "sent_stats", "received_stats", "dropped_stats",
					"health stats", "udsp info", "last_alive"}
				p.mapping(e, ipath, peerNIKnown, func(k string, v *yaml.Node, kp string) {
					if k == "nid" {
						pc.NIDs = append(pc.NIDs, p.nid(v, kp))
					}
				})
			})
		}
	})
	if p.err == nil && pc.PrimaryNID == "" {
		p.fail(n, path, "a peer needs a \"primary nid\"")
	}
	return pc
}

// Doc renders the configuration as the lnetctl export document. With
// full, globals, tunables and lnd tunables list every key with defaults
// filled in (what `lnetctl export` prints); otherwise only the keys set.
func (c *Config) Doc(full bool) Map {
	doc := Map{}
	if len(c.Nets) > 0 {
		nets := List{}
		for _, n := range c.Nets {
			nets = append(nets, n.doc(full))
		}
		doc = doc.add(keyNet, nets)
	}
	if len(c.Routes) > 0 {
		rs := List{}
		for _, r := range c.Routes {
			rs = append(rs, Map{}.add(keyNet, r.Net).add("gateway", r.Gateway).add("hop", r.Hop).
				add("priority", r.Priority).add("health_sensitivity", r.HealthSensitivity))
		}
		doc = doc.add("route", rs)
	}
	if len(c.Peers) > 0 {
		ps := List{}
		for _, p := range c.Peers {
			nis := List{}
			for _, n := range p.NIDs {
				nis = append(nis, Map{}.add("nid", n))
			}
			ps = append(ps, Map{}.add(keyPrimaryNID, p.PrimaryNID).add(keyMultiRail, p.MultiRail).add(keyPeerNI, nis))
		}
		doc = doc.add("peer", ps)
	}
	if m := settingsDoc(c.Global, globalTable, full); m != nil {
		doc = doc.add("global", m)
	}
	if m := settingsDoc(c.Routing, routingTable, full); m != nil {
		doc = doc.add("routing", m)
	}
	if m := settingsDoc(c.Buffers, buffersTable, full); m != nil {
		doc = doc.add("buffers", m)
	}
	return doc
}

func (n NetConfig) doc(full bool) Map {
	nis := List{}
	for _, ni := range n.NIs {
		m := Map{}
		if ni.NID != "" {
			m = m.add("nid", ni.NID)
		}
		if len(ni.Interfaces) > 0 {
			ifs := Map{}
			for i, s := range ni.Interfaces {
				ifs = ifs.add(strconv.Itoa(i), s)
			}
			m = m.add(keyInterfaces, ifs)
		}
		if t := settingsDoc(ni.Tunables, tunablesTable, full); t != nil {
			m = m.add(keyTunables, t)
		}
		if lt := lndTable(lndName(n.Type)); lt != nil {
			if t := settingsDoc(ni.LNDTunables, lt, full); t != nil {
				m = m.add(keyLNDTunables, t)
			}
		}
		if ni.CPT != "" {
			m = m.add("CPT", ni.CPT)
		}
		nis = append(nis, m)
	}
	out := Map{}.add(keyNetType, n.Type)
	if len(nis) > 0 {
		out = out.add(keyLocalNIs, nis)
	}
	return out
}

// settingsDoc renders a settings section; nil when empty and not full.
func settingsDoc(s Settings, t table, full bool) Map {
	if full {
		s = t.effective(s)
	}
	if len(s) == 0 {
		return nil
	}
	m := Map{}
	for _, e := range s {
		k, _ := t.lookup(e.Name)
		m = m.add(e.Name, k.format(e.Value))
	}
	return m
}

// Marshal returns the configuration as lnetctl-style YAML (only the keys
// set); ParseConfig reads it back to an equal Config.
func (c *Config) Marshal() []byte { return YAML(c.Doc(false)) }

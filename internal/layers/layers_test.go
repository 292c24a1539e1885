// Package layers_test enforces softib's import rules: layers import only
// downward (wire formats → verbs → provider → cm/rdmacm → lnet → LNDs →
// tools → cmd), so that, for example, verbs never depends on a provider and
// the LNet core never depends on a concrete network driver.
//
// Every package is classified: a package that no rule names fails the test,
// so a new package has to be placed in the layering on purpose. Rules name
// exact packages ("softib/lnet") or whole subtrees ("softib/tools/..."); the
// most specific rule wins. Only non-test imports are checked: tests may
// reach for a provider or a test double to exercise their layer.
package layers_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Imports    []string
}

// internal packages every layer may use: they depend on nothing of
// softib's layers (checked by their own rules below).
var base = []string{"softib/internal/seqnum", "softib/internal/stats", "softib/internal/pool", "softib/internal/pcap", "softib/internal/peercred"}

func with(extra ...string) []string { return append(append([]string{}, base...), extra...) }

// rules maps a package pattern to the softib packages it may import
// (patterns too). A pattern ending in "/..." covers that directory and
// everything below it; otherwise it names one package.
var rules = map[string][]string{
	// Leaf helpers.
	"softib/internal/seqnum":     nil,
	"softib/internal/stats":      nil,
	"softib/internal/pool":       nil,
	"softib/internal/pcap":       nil,
	"softib/internal/peercred":   nil,
	"softib/internal/testenv":    nil,
	"softib/internal/testaddr":   nil,
	"softib/internal/leakcheck":  nil,
	"softib/internal/e2etest":    {"softib/internal/testaddr", "softib/internal/testenv", "softib/udp"},
	"softib/internal/layers":     nil,
	"softib/internal/faildigest": nil,
	"softib/internal/netns":      {"softib/internal/stats", "softib/internal/testenv"},
	"softib/internal/netemu":     {"softib/internal/stats", "softib/internal/testenv"},
	"softib/internal/tsharktest": {"softib/internal/testenv"},
	// The verbs conformance suite every provider passes.
	"softib/internal/conformance": {"softib/verbs"},

	// Wire formats: typed byte views, nothing above them.
	"softib/wire/...": with("softib/wire/..."),

	// The verbs API knows no provider.
	"softib/verbs": with(),

	// Batched UDP, and its simulated network (a test double).
	"softib/udp":         with(),
	"softib/udp/udptest": with("softib/udp"),

	// The verbs test harness (rxe devices on udptest or loopback): only
	// tests import it, so it is in no production allow list.
	"softib/internal/verbstest": with("softib/internal/testaddr", "softib/rxe", "softib/udp/udptest", "softib/verbs"),

	// Providers: the pure-Go Soft-RoCE, and libibverbs (build tag ibverbs).
	"softib/ibverbs": with("softib/verbs"),
	"softib/rxe":     with("softib/verbs", "softib/wire/roce", "softib/udp"),

	// Kernel-style RDMA READ/WRITE contexts over any verbs provider.
	"softib/rdmarw": with("softib/verbs"),

	// Connection managers work on any verbs provider.
	"softib/cm":     with("softib/verbs", "softib/wire/..."),
	"softib/rdmacm": with("softib/cm", "softib/verbs", "softib/wire/..."),

	// LNet: the LND interface, the core (which knows the interface and the
	// loopback driver, never a network driver), and the drivers.
	"softib/lnet/lnd":         with("softib/wire/lnetwire"),
	"softib/lnet/lnd/lndtest": with("softib/lnet/lnd", "softib/wire/lnetwire"),
	"softib/lnet/lolnd":       with("softib/lnet/lnd", "softib/wire/lnetwire"),
	"softib/lnet":             with("softib/lnet/lnd", "softib/lnet/lolnd", "softib/wire/lnetwire"),
	"softib/lnet/socklnd":     with("softib/lnet/lnd", "softib/wire/lnetwire"),
	"softib/lnet/o2iblnd":     with("softib/lnet/lnd", "softib/rdmacm", "softib/cm", "softib/verbs", "softib/wire/lnetwire", "softib/wire/mad"),
	// lnet_selftest runs on an LNet instance its caller built: it takes
	// its drivers from the caller and imports none.
	"softib/lnet/selftest": with("softib/lnet", "softib/lnet/lnd", "softib/wire/lnetwire"),

	// Block storage: the SCSI target core knows no transport; the SRP and
	// iSER targets sit beside LNet, above the connection managers and
	// rdma_rw.
	"softib/storage/scsi": with(),
	// What the SRP and iSER targets share: the RDMA CM and IB CM
	// listeners, a connection's queues and teardown, RDMA READs through
	// rdma_rw.
	"softib/storage/internal/rdmatarget": with("softib/storage/scsi", "softib/rdmarw", "softib/rdmacm", "softib/cm", "softib/verbs", "softib/wire/mad"),
	// The iSER and SRP tests' rig (imported by tests only).
	"softib/storage/internal/targettest": with("softib/storage/scsi", "softib/rdmacm", "softib/cm", "softib/rxe"),
	"softib/storage/...":                 with("softib/storage/scsi", "softib/storage/internal/rdmatarget", "softib/rdmarw", "softib/rdmacm", "softib/cm", "softib/verbs", "softib/wire/..."),

	// Tools and the CLI may use any layer (the CLI is imported by nothing).
	"softib/tools/...":   {"softib/..."},
	"softib/cmd/softib":  {"softib/..."},
	"softib/interop/...": {"softib/..."},
}

// testDoubles may be imported by any package's non-test code at or above
// the layer they stand in for; listed explicitly rather than by name
// pattern.
var testDoubles = map[string]bool{
	"softib/internal/testenv": true,
}

// match reports whether path matches pattern and how specific the match is
// (longer is more specific; -1 when it does not match).
func match(path, pattern string) int {
	if p, ok := strings.CutSuffix(pattern, "/..."); ok {
		if path == p || strings.HasPrefix(path, p+"/") {
			return len(p)
		}
		return -1
	}
	if path == pattern {
		return len(pattern) + 1 // an exact name beats a subtree of the same length
	}
	return -1
}

// ruleFor returns the allow list of the most specific rule for path.
func ruleFor(path string) ([]string, bool) {
	best, bestLen := []string(nil), -1
	for pat, allow := range rules {
		if n := match(path, pat); n > bestLen {
			best, bestLen = allow, n
		}
	}
	return best, bestLen >= 0
}

// testOnly are test harnesses: only _test files may import them (this
// test sees no such import), not even the tools, which may otherwise use
// any layer.
var testOnly = map[string]bool{
	"softib/internal/verbstest": true,
	"softib/internal/e2etest":   true,
	"softib/internal/leakcheck": true,
}

func allowed(p pkg, imp string) bool {
	if match(imp, "softib/cmd/...") >= 0 {
		return false // nothing imports the CLI
	}
	if testOnly[imp] {
		return false
	}
	if testDoubles[imp] {
		return true
	}
	allow, _ := ruleFor(p.ImportPath)
	for _, a := range allow {
		if match(imp, a) >= 0 {
			return true
		}
	}
	return false
}

func TestImportLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "softib/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		if _, ok := ruleFor(p.ImportPath); !ok {
			t.Errorf("%s has no layering rule: add it to internal/layers", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, "softib/") {
				continue
			}
			if !allowed(p, imp) {
				t.Errorf("%s imports %s, which breaks the layering", p.ImportPath, imp)
			}
		}
	}
	if n == 0 {
		t.Fatal("no packages listed")
	}
}

// TestRules checks the rule matcher itself on the cases the layering
// depends on.
func TestRules(t *testing.T) {
	cases := []struct {
		pkg, imp string
		ok       bool
	}{
		{"softib/lnet", "softib/lnet/lnd", true},
		{"softib/lnet", "softib/lnet/lolnd", true},
		{"softib/lnet", "softib/lnet/socklnd", false},
		{"softib/lnet", "softib/lnet/o2iblnd", false},
		{"softib/lnet/selftest", "softib/lnet/socklnd", false},
		{"softib/lnet/selftest", "softib/lnet", true},
		{"softib/cm", "softib/rxe", false},
		{"softib/cm", "softib/udp", false},
		{"softib/rdmacm", "softib/rxe", false},
		{"softib/cm", "softib/internal/verbstest", false},
		{"softib/tools/demo", "softib/internal/verbstest", false},
		{"softib/cmd/softib", "softib/internal/e2etest", false},
		{"softib/rdmacm", "softib/internal/verbstest", false},
		{"softib/rdmacm", "softib/cm", true},
		{"softib/verbs", "softib/rxe", false},
		{"softib/rxe", "softib/cm", false},
		{"softib/wire/mad", "softib/wire/roce", true},
		{"softib/wire/mad", "softib/verbs", false},
		{"softib/tools/demo", "softib/lnet/socklnd", true},
		{"softib/tools/demo", "softib/cmd/softib", false},
		{"softib/lnet/o2iblnd", "softib/rxe", false},
		{"softib/lnet/socklnd", "softib/lnet", false},
	}
	for _, c := range cases {
		if got := allowed(pkg{ImportPath: c.pkg}, c.imp); got != c.ok {
			t.Errorf("%s -> %s: allowed %v, want %v", c.pkg, c.imp, got, c.ok)
		}
	}
	if _, ok := ruleFor("softib/newpkg"); ok {
		t.Error("an unlisted package matched a rule")
	}
}

// Package layers_test enforces softib's import rules: layers import only
// downward (wire formats → verbs → provider → cm/rdmacm → lnet → LNDs →
// cmd), so that, for example, verbs never depends on a provider and the
// LNet core never depends on a concrete network driver.
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

// rule says which softib packages a package matching prefix may import
// (by prefix); an empty allow list means no softib package at all.
type rule struct {
	prefix string
	allow  []string
}

var rules = []rule{
	{"softib/internal/seqnum", nil},
	{"softib/wire/", []string{"softib/wire/", "softib/internal/seqnum"}},
	{"softib/verbs", nil},
	{"softib/udp", []string{"softib/udp", "softib/internal/"}},
	{"softib/rxe", []string{"softib/rxe", "softib/verbs", "softib/wire/roce", "softib/udp", "softib/internal/"}},
	{"softib/cm", []string{"softib/cm", "softib/verbs", "softib/wire/", "softib/internal/", "softib/rxe", "softib/udp"}},
	{"softib/rdmacm", []string{"softib/rdmacm", "softib/cm", "softib/verbs", "softib/wire/", "softib/internal/", "softib/rxe", "softib/udp"}},
	{"softib/lnet/lnd", []string{"softib/lnet/lnd", "softib/wire/lnetwire", "softib/internal/"}},
	// The LNet core knows the LND interface, never a concrete driver.
	{"softib/lnet", []string{"softib/lnet", "softib/wire/lnetwire", "softib/internal/"}},
}

// drivers may import the core and the layers below it.
var driverPrefixes = []string{"softib/lnet/socklnd", "softib/lnet/lolnd", "softib/lnet/o2iblnd"}

// under reports whether path is prefix or a package below it.
func under(path, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

func allowed(p pkg, imp string) bool {
	// Test doubles (udptest, lndtest, ...) join layers on purpose.
	if strings.HasSuffix(p.ImportPath, "test") {
		return !under(imp, "softib/cmd")
	}
	for _, d := range driverPrefixes {
		if under(p.ImportPath, d) {
			return !under(imp, "softib/cmd") && !under(imp, "softib/tools")
		}
	}
	for _, r := range rules {
		if under(p.ImportPath, r.prefix) {
			for _, a := range r.allow {
				if under(imp, a) {
					return true
				}
			}
			return false
		}
	}
	// Everything else (tools, cmd, test helpers) may import any layer,
	// but nothing imports cmd.
	return !under(imp, "softib/cmd")
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
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, "softib/") {
				continue
			}
			if strings.HasPrefix(imp, "softib/internal/testenv") {
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

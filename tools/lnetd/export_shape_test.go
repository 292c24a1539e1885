//go:build linux

package lnetd

import (
	"flag"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// keyPaths lists the key paths of a YAML document: mapping keys joined
// by "/", a sequence's items as "[]", so two documents with the same
// sections, fields and nesting (whatever their values and item counts)
// give the same set. Under "interfaces" the keys are item numbers, kept
// as "N".
func keyPaths(t *testing.T, b []byte) []string {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if strings.HasSuffix(path, "/interfaces") {
					k = "N"
				}
				p := path + "/" + k
				set[p] = true
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, path+"/[]")
			}
		}
	}
	walk(&root, "")
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

var updateShape = flag.Bool("update-export-shape", false, "rewrite testdata/export-shape-diffs.txt from this run")

// TestExportShapeMatchesLustre217: softib's `lnetctl export` and
// `export --backup` of a node with a tcp and an o2ib NI, a configured
// Multi-Rail peer and a route are compared, key by key (sections, fields
// and nesting; not values), with what the kernel's lnetctl of Lustre
// 2.17 wrote for the same configuration on the interop guest
// (testdata/lustre217-export*.yaml; see their header). The differences
// are pinned in testdata/export-shape-diffs.txt ("-" a key softib lacks,
// "+" a key only softib writes): any new difference fails the test, and
// closing one means deleting its line (go test -run
// TestExportShapeMatchesLustre217 -update-export-shape rewrites it).
func TestExportShapeMatchesLustre217(t *testing.T) {
	ip := testIP()
	a := startO2IBInproc(t, ip, reservePort(), "")
	gw := netip.MustParseAddr(ip).Next().String() + "@tcp"
	ctlOK(t, a.sock, "peer", "add", "--prim_nid", "10.99.0.1@tcp", "--nid", "10.99.0.2@tcp")
	ctlOK(t, a.sock, "route", "add", "--net", "tcp7", "--gateway", gw, "--hop", "2", "--priority", "1")
	var diffs []string
	for _, c := range []struct{ file, mode string }{
		{"testdata/lustre217-export.yaml", "export"},
		{"testdata/lustre217-export-backup.yaml", "export --backup"},
	} {
		ref, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		want, got := keyPaths(t, ref), keyPaths(t, []byte(ctlOK(t, a.sock, strings.Fields(c.mode)...)))
		for _, p := range want {
			if !slices.Contains(got, p) {
				diffs = append(diffs, c.mode+": -"+p)
			}
		}
		for _, p := range got {
			if !slices.Contains(want, p) {
				diffs = append(diffs, c.mode+": +"+p)
			}
		}
	}
	const golden = "testdata/export-shape-diffs.txt"
	if *updateShape {
		if err := os.WriteFile(golden, []byte(strings.Join(diffs, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	known := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, d := range diffs {
		if !slices.Contains(known, d) {
			t.Errorf("new difference from Lustre 2.17's export: %s", d)
		}
	}
	for _, d := range known {
		if !slices.Contains(diffs, d) {
			t.Errorf("difference gone (delete its line from %s): %s", golden, d)
		}
	}
}

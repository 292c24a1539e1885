package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDigest(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example\n\ngo 1.22\n")
	write("a/x_test.go", "package a\n\tt.Logf(\"boot\")\n\tt.Errorf(\"bad %d\", 1)\n\tcheck(t)\n")
	write("b/x_test.go", "package b\n\tt.Logf(\"other package, same file name\")\n")
	log := strings.Join([]string{
		"--- FAIL: TestA (1.00s)",
		"    x_test.go:2: boot",
		"        long transcript",
		"    x_test.go:3: bad 1",
		"        detail 1",
		"        detail 2",
		"    helper.go:7: from a helper in another package",
		"    x_test.go:4: the helper's call site",
		"    --- FAIL: TestA/sub (0.50s)",
		"        x_test.go:3: in a subtest",
		"FAIL",
		"FAIL\texample/a\t1.5s",
		"ok  \texample/b\t0.1s",
	}, "\n")
	fails, err := parse(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(fails) != 2 || fails[0].name != "TestA" || fails[1].name != "TestA/sub" || fails[0].pkg != "example/a" || fails[1].pkg != "example/a" {
		t.Fatalf("parse: %+v %+v", fails[0], fails[1])
	}
	var b strings.Builder
	digest(&b, fails, newSources(root), 1, 1)
	got := b.String()
	for _, want := range []string{"### example/a TestA", "x_test.go:3: bad 1", "detail 1", "helper.go:7:", "x_test.go:4:", "in a subtest", "--- last 1 lines of TestA:"} {
		if !strings.Contains(got, want) {
			t.Errorf("digest lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"x_test.go:2: boot", "detail 2"} {
		if strings.Contains(strings.Split(got, "--- last")[0], not) {
			t.Errorf("digest shows %q before the tail:\n%s", not, got)
		}
	}
}

func TestDigestVerbose(t *testing.T) {
	log := strings.Join([]string{
		"=== RUN   TestB",
		"    x_test.go:3: failed here",
		"--- FAIL: TestB (1.00s)",
		"=== RUN   TestC",
		"    x_test.go:3: passing test's line",
		"--- PASS: TestC (1.00s)",
		"FAIL",
		"FAIL\texample/a\t1.5s",
	}, "\n")
	fails, err := parse(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	if len(fails) != 1 || len(fails[0].lines) != 1 || fails[0].lines[0] != "    x_test.go:3: failed here" {
		t.Fatalf("parse: %d failures: %+v", len(fails), fails)
	}
}

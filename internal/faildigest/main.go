// Command faildigest condenses the failures in a `go test` log (plain
// text, several packages) into what a CI summary needs: for every failing
// test, its package and the log entries that are not plain t.Log/t.Logf
// output, that is the t.Error/t.Fatal messages and those of test helpers,
// each with its first continuation lines, then the tail of the test's
// output. CI excerpts show only the end of a run's output, where a long
// failing test's own log (guest boot, tool transcripts, daemon logs)
// would otherwise hide the line that failed it.
//
// Usage: go run ./internal/faildigest [-root DIR] [-cont N] [-tail N] LOG
//
// An entry's kind is read from the source line it names ("x_test.go:42:"):
// a line calling Log or Logf is a log entry and left out, one calling
// Error, Errorf, Fatal, Fatalf or Fail is shown first with its
// continuation lines, anything else (a helper's call site, a file not
// found) a line each after them.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

var (
	failLine  = regexp.MustCompile(`^\s*--- FAIL: (\S+)`)
	runLine   = regexp.MustCompile(`^=== (?:RUN|CONT|NAME)\s+(\S+)`)
	pkgLine   = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)\s`)
	entryLine = regexp.MustCompile(`^(\s+)([A-Za-z0-9_.\-]+\.go):(\d+): `)
	logCall   = regexp.MustCompile(`\.Logf?\(`)
	errCall   = regexp.MustCompile(`\.(Errorf?|Fatalf?|Fail|FailNow)\(`)
)

// failure is one failing test's block of output.
type failure struct {
	name  string
	pkg   string
	lines []string
}

// parse splits a go test log into failing-test blocks. A block starts at
// "--- FAIL: name" and runs until the next "--- ", "=== " or package
// result line; blocks get the package of the next "FAIL\tpkg" line. With
// -v, where a test's output comes before its "--- FAIL" line, the block
// is what followed the test's "=== RUN" (or "=== CONT") lines instead.
func parse(r io.Reader) ([]*failure, error) {
	var out, pending []*failure
	var cur *failure
	ran := map[string][]string{} // -v: output since "=== RUN name"
	running := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		l := sc.Text()
		if m := runLine.FindStringSubmatch(l); m != nil {
			running, cur = m[1], nil
			continue
		}
		if m := failLine.FindStringSubmatch(l); m != nil {
			cur = &failure{name: m[1], lines: ran[m[1]]}
			pending = append(pending, cur)
			running = ""
			continue
		}
		if running != "" && !pkgLine.MatchString(l) {
			ran[running] = append(ran[running], l)
		}
		if m := pkgLine.FindStringSubmatch(l); m != nil {
			for _, f := range pending {
				f.pkg = m[2]
			}
			out = append(out, pending...)
			pending, cur, running = nil, nil, ""
			clear(ran)
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(l), "--- ") || strings.HasPrefix(l, "=== ") || l == "FAIL" || l == "PASS" {
			cur, running = nil, ""
			continue
		}
		if cur != nil {
			cur.lines = append(cur.lines, l)
		}
	}
	return append(out, pending...), sc.Err()
}

// sources finds a source file by package and base name.
type sources struct {
	root   string
	module string
	byBase map[string][]string
	cache  map[string][]string
}

func newSources(root string) *sources {
	s := &sources{root: root, byBase: map[string][]string{}, cache: map[string][]string{}}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
				s.module = f[1]
			}
		}
	}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			s.byBase[d.Name()] = append(s.byBase[d.Name()], p)
		}
		return nil
	})
	return s
}

// line returns source line n of the file named base, preferring the
// failing package's directory; ok is false when no such line is found.
func (s *sources) line(pkg, base string, n int) (string, bool) {
	cands := s.byBase[base]
	if rel, found := strings.CutPrefix(pkg, s.module+"/"); found && s.module != "" {
		p := filepath.Join(s.root, filepath.FromSlash(rel), base)
		if _, err := os.Stat(p); err == nil {
			cands = []string{p}
		}
	}
	if len(cands) != 1 {
		return "", false
	}
	lines, ok := s.cache[cands[0]]
	if !ok {
		b, err := os.ReadFile(cands[0])
		if err == nil {
			lines = strings.Split(string(b), "\n")
		}
		s.cache[cands[0]] = lines
	}
	if n < 1 || n > len(lines) {
		return "", false
	}
	return lines[n-1], true
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + " …"
	}
	return s
}

func digest(w io.Writer, fails []*failure, src *sources, cont, tail int) {
	for _, f := range fails {
		fmt.Fprintf(w, "### %s %s (%d lines of output)\n", f.pkg, f.name, len(f.lines))
		// Entries whose source line calls Error/Fatal come first, with
		// their continuation lines; then, a line each, those of unknown
		// kind (a helper's call site: its message may be an error or a
		// helper's log).
		var other []string
		shown := 0
		for i := 0; i < len(f.lines); i++ {
			m := entryLine.FindStringSubmatch(f.lines[i])
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[3])
			sl, ok := src.line(f.pkg, m[2], n)
			if ok && logCall.MatchString(sl) {
				continue
			}
			if !ok || !errCall.MatchString(sl) {
				other = append(other, clip(f.lines[i], 200))
				continue
			}
			fmt.Fprintln(w, clip(f.lines[i], 400))
			shown++
			for j := i + 1; j < len(f.lines) && j <= i+cont; j++ {
				if entryLine.MatchString(f.lines[j]) {
					break
				}
				fmt.Fprintln(w, clip(f.lines[j], 400))
			}
		}
		if len(other) > 0 {
			fmt.Fprintf(w, "--- %d entries from helpers' call sites (errors or helper logs), first lines:\n", len(other))
			for _, l := range other {
				fmt.Fprintln(w, l)
			}
		}
		if shown == 0 && len(other) == 0 {
			fmt.Fprintln(w, "(no error entry recognised; the test's last lines follow)")
		}
		if tail > 0 {
			start := max(len(f.lines)-tail, 0)
			fmt.Fprintf(w, "--- last %d lines of %s:\n", len(f.lines)-start, f.name)
			for _, l := range f.lines[start:] {
				fmt.Fprintln(w, clip(l, 400))
			}
		}
	}
}

func main() {
	root := flag.String("root", ".", "module root holding the tests' sources")
	cont := flag.Int("cont", 8, "continuation lines shown per error entry")
	tail := flag.Int("tail", 6, "last lines of each failing test's output shown")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: faildigest [-root DIR] [-cont N] [-tail N] LOG")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	fh, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "faildigest: %v\n", err)
		os.Exit(1)
	}
	defer fh.Close()
	fails, err := parse(fh)
	if err != nil {
		fmt.Fprintf(os.Stderr, "faildigest: reading %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	digest(os.Stdout, fails, newSources(*root), *cont, *tail)
}

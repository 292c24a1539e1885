package lst

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"
)

// runLst runs the CLI in-process on a private session file.
func runLst(t *testing.T, file string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), append([]string{"--session", file}, args...), &out, &errb, Options{})
	return code, out.String(), errb.String()
}

// TestCLIOffline covers the commands that need no node: the session
// file, batches, and command-line errors.
func TestCLIOffline(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.json")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"add_batch", "b"}, 1, "no session"},
		{[]string{"new_session"}, 2, "new_session NAME"},
		{[]string{"new_session", "s", "--timeout", "30", "--force"}, 0, "SESSION: s FEATURES: 1 TIMEOUT: 30 FORCE: Yes"},
		{[]string{"new_session", "t"}, 1, "end_session first"},
		{[]string{"show_session"}, 0, "s ID: "},
		{[]string{"add_batch", "b"}, 0, ""},
		{[]string{"add_batch", "b"}, 1, "already exists"},
		{[]string{"add_batch", "has space"}, 1, "bad batch name"},
		{[]string{"list_batch"}, 0, "1) b (0 tests)"},
		{[]string{"list_batch", "--json"}, 0, `"batches": [`},
		{[]string{"show_session", "--json"}, 0, `"force": true`},
		{[]string{"list_group", "--json"}, 0, `"groups": []`},
		{[]string{"add_test", "--batch", "b", "--from", "c", "brw"}, 2, "needs --batch, --from and --to"},
		{[]string{"add_test", "--batch", "b", "--from", "c", "--to", "s", "brw", "size=3M"}, 2, "want 8..1M"},
		{[]string{"add_test", "--batch", "b", "--from", "c", "--to", "s", "brw", "size=1001"}, 2, "multiple of 8"},
		{[]string{"add_test", "--batch", "b", "--from", "c", "--to", "s", "--distribute", "1-1", "ping"}, 2, "want a:b"},
		{[]string{"add_test", "--batch", "b", "--from", "c", "--to", "s", "--loop", "0", "ping"}, 2, "--loop 0"},
		{[]string{"run", "b"}, 1, "has no tests"},
		{[]string{"stat"}, 2, "stat GROUP"},
		{[]string{"quick", "--from", "1.2.3.4@tcp", "ping"}, 2, "needs --from and --to"},
		{[]string{"quick", "--from", "x", "--to", "1.2.3.4@tcp", "ping"}, 2, "--from"},
		{[]string{"list_group"}, 0, "Total 0 groups"},
		{[]string{"end_session"}, 0, "session s ended"},
		{[]string{"show_session"}, 1, "no session"},
	} {
		code, out, errs := runLst(t, file, tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("lst %q: exit %d, output %q%q; want exit %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
}

// TestSplitTest: flags may follow the test spec ("brw write size=1M
// --seconds 5", as the README writes it), with or without "=", and a
// boolean flag takes no value.
func TestSplitTest(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Float64("seconds", 5, "")
	fs.Bool("json", false, "")
	for _, tc := range []struct{ in, flags, test string }{
		{"--from a brw write size=1M", "--from a", "brw write size=1M"},
		{"--from a brw write size=1M --seconds 5", "--from a --seconds 5", "brw write size=1M"},
		{"brw --json write --seconds=2 check=full", "--json --seconds=2", "brw write check=full"},
		{"--from a ping --json", "--from a --json", "ping"},
		{"--from a", "--from a", ""},
	} {
		f, te := splitTest(fs, strings.Fields(tc.in))
		if strings.Join(f, " ") != tc.flags || strings.Join(te, " ") != tc.test {
			t.Errorf("splitTest(%q) = %q, %q; want %q, %q", tc.in, f, te, tc.flags, tc.test)
		}
	}
}

package lustre_test

import "testing"

// TestKernelRegFailure: the lines of a guest kernel debug log (dumped
// from an LnetdCrash run, 2026-11-27) that account for a new session's
// errors, and logs that do not.
func TestKernelRegFailure(t *testing.T) {
	const soft = "192.168.77.1@o2ib"
	run := "transaction STATQRY : success 1, failure 0, total 1, RPC error(0), Framework error(0)\n"
	reg := "FastReg failed: 2\nRx from 192.168.77.1@o2ib failed: 5\nkiblnd_close_conn_locked\n"
	closing := "Closing conn 00000000dd20a11b to 192.168.77.1@o2ib: error -5(waiting)\n"
	for _, c := range []struct {
		name, dk, want string
	}{
		{"registration failure, then the close", run + reg + closing, "FastReg failed: 2; Closing conn 00000000dd20a11b to 192.168.77.1@o2ib: error -5(waiting)"},
		{"close only", run + closing, ""},
		{"close before the failure", closing + run + reg, ""},
		{"another peer's connection", reg + "Closing conn 00000000dd20a11b to 192.168.77.3@o2ib: error -5(waiting)\n", ""},
		{"registration failure only", run + reg, ""},
		{"empty", "", ""},
	} {
		if got := kernelRegFailure(c.dk, soft); got != c.want {
			t.Errorf("%s: kernelRegFailure = %q, want %q", c.name, got, c.want)
		}
	}
}

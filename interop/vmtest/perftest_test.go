package vmtest

import (
	"errors"
	"testing"

	"softib/interop/vm"
)

// clockFailure is a guest perftest's output when its clock calibration
// fails (CI, ib_write_bw as client, after the transfer).
var clockFailure = vm.Result{Code: 1, Stdout: " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
	Stderr: "Correlation coefficient r^2: 0.798461 < 0.9\nCan't produce a report\n"}

func TestPerftestClockFailed(t *testing.T) {
	for _, c := range []struct {
		name string
		r    vm.Result
		want bool
	}{
		{"calibration", clockFailure, true},
		{"exit 0", vm.Result{Stderr: clockFailure.Stderr}, false},
		{"other failure", vm.Result{Code: 1, Stderr: "Couldn't connect to 192.168.77.2:18602\n"}, false},
		{"report only", vm.Result{Code: 1, Stderr: "Can't produce a report\n"}, false},
	} {
		if got := PerftestClockFailed(c.r); got != c.want {
			t.Errorf("%s: PerftestClockFailed = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRetryPerftestClock(t *testing.T) {
	run := func(results ...vm.Result) (int, vm.Result) {
		n := 0
		r, _ := RetryPerftestClock(t, func() (vm.Result, error) {
			n++
			return results[n-1], nil
		})
		return n, r
	}
	if n, r := run(clockFailure, vm.Result{}); n != 2 || r.Code != 0 {
		t.Errorf("calibration then success: %d runs, last rc %d; want 2 runs, rc 0", n, r.Code)
	}
	if n, r := run(clockFailure, clockFailure, clockFailure); n != PerftestClockRuns || !PerftestClockFailed(r) {
		t.Errorf("calibration every time: %d runs, want %d ending on the failure", n, PerftestClockRuns)
	}
	other := vm.Result{Code: 1, Stderr: "Couldn't connect\n"}
	if n, r := run(other); n != 1 || r.Code != 1 {
		t.Errorf("another failure: %d runs, rc %d; want 1 run, rc 1", n, r.Code)
	}
	wantErr := errors.New("job lost")
	if _, err := RetryPerftestClock(t, func() (vm.Result, error) { return vm.Result{}, wantErr }); err != wantErr {
		t.Errorf("error from run: %v, want %v", err, wantErr)
	}
}

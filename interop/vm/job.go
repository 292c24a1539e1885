package vm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Prelude is prepended to every job script. It gives jobs small helpers
// that run without spawning processes where possible (spawns cost tens of
// milliseconds under TCG):
//
//	nap SECONDS          sleep without a spawn
//	mark NAME            create the marker NAME for this job (see Job.WaitMarker)
//	listening PORT       true when a TCP socket listens on PORT
//	wait_listen PORT PID wait until PORT listens (then mark "ready") or PID exits
const Prelude = `exec {napfd}<>/run/tick
nap() { read -r -t "$1" -u "$napfd" || true; }
mark() { : >"$JOB_DIR/$JOB_ID.$1"; }
listening() {
	local want f sl la rest
	printf -v want '%04X' "$1"
	for f in /proc/net/tcp /proc/net/tcp6; do
		while read -r sl la _ st rest; do
			[[ $la == *:$want && $st == 0A ]] && return 0
		done <"$f"
	done
	return 1
}
wait_listen() {
	while kill -0 "$2" 2>/dev/null; do
		if listening "$1"; then mark ready; return 0; fi
		nap 0.05
	done
	return 1
}
`

// Result is the outcome of a finished job.
type Result struct {
	// Code is the exit status inside the guest; 124 (or 137) means the
	// guest-side timeout hit.
	Code int
	// Elapsed is the job's run time measured by the guest.
	Elapsed time.Duration
	// Stdout and Stderr are the job's output.
	Stdout, Stderr string
}

// TimedOut reports whether the guest-side timeout ended the job.
func (r Result) TimedOut() bool { return r.Code == 124 || r.Code == 137 }

// Job is a script running in the guest.
type Job struct {
	v  *VM
	ID string
}

// ErrTimeout reports that the host gave up waiting for a job.
var ErrTimeout = errors.New("vm: job wait timed out")

// sanitize keeps job labels usable as file names.
func sanitize(label string) string {
	var b strings.Builder
	for _, r := range label {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() > 40 {
		return b.String()[:40]
	}
	return b.String()
}

// JobScript renders the file the guest init runs: the timeout line, the
// prelude, then the script.
func JobScript(script string, timeout time.Duration) string {
	secs := int(math.Ceil(timeout.Seconds()))
	if secs < 1 {
		secs = 1
	}
	return fmt.Sprintf("#timeout=%d\n%s\n%s\n", secs, Prelude, script)
}

// Go starts script (bash) in the guest, bounded by timeout inside the
// guest. label names the job's files in the share.
func (v *VM) Go(label, script string, timeout time.Duration) (*Job, error) {
	select {
	case <-v.exited:
		return nil, ErrExited
	default:
	}
	id := fmt.Sprintf("j%04d-%s", v.seq.Add(1), sanitize(label))
	tmp := filepath.Join(v.share, id+".tmp")
	if err := os.WriteFile(tmp, []byte(JobScript(script, timeout)), 0o644); err != nil {
		return nil, err
	}
	// The rename makes the job appear whole to the guest's poll loop.
	if err := os.Rename(tmp, filepath.Join(v.share, id+".job")); err != nil {
		return nil, err
	}
	return &Job{v: v, ID: id}, nil
}

// Run starts script and waits for it. The host waits a little longer than
// the guest-side timeout, so a wedged guest surfaces as ErrTimeout.
func (v *VM) Run(ctx context.Context, label, script string, timeout time.Duration) (Result, error) {
	j, err := v.Go(label, script, timeout)
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	return j.Wait(ctx)
}

func (j *Job) path(ext string) string { return filepath.Join(j.v.share, j.ID+ext) }

// Done reports whether the job has finished.
func (j *Job) Done() bool {
	_, err := os.Stat(j.path(".rc"))
	return err == nil
}

// Kill asks the guest to terminate the job (SIGTERM to its timeout
// wrapper, which forwards it). Wait still returns its result.
func (j *Job) Kill() {
	_ = os.WriteFile(j.path(".kill"), nil, 0o644)
}

// poll waits until cond holds, the VM exits, or ctx ends.
func (j *Job) poll(ctx context.Context, cond func() bool) error {
	for {
		if cond() {
			return nil
		}
		select {
		case <-j.v.exited:
			if cond() {
				return nil
			}
			return ErrExited
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %v", ErrTimeout, j.ID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Wait waits for the job to finish and returns its result.
func (j *Job) Wait(ctx context.Context) (Result, error) {
	if err := j.poll(ctx, j.Done); err != nil {
		return j.partial(), err
	}
	b, err := os.ReadFile(j.path(".rc"))
	if err != nil {
		return Result{}, err
	}
	r, err := ParseRC(string(b))
	if err != nil {
		return Result{}, fmt.Errorf("vm: job %s: %w", j.ID, err)
	}
	out, _ := os.ReadFile(j.path(".out"))
	errb, _ := os.ReadFile(j.path(".err"))
	r.Stdout, r.Stderr = string(out), string(errb)
	return r, nil
}

// partial returns whatever output an unfinished job has produced so far.
func (j *Job) partial() Result {
	out, _ := os.ReadFile(j.path(".out"))
	errb, _ := os.ReadFile(j.path(".err"))
	return Result{Code: -1, Stdout: string(out), Stderr: string(errb)}
}

// WaitMarker waits until the job creates marker name (with the prelude's
// "mark name"), or the job ends first, which is an error.
func (j *Job) WaitMarker(ctx context.Context, name string) error {
	marker := j.path("." + name)
	has := func() bool { _, err := os.Stat(marker); return err == nil }
	if err := j.poll(ctx, func() bool { return has() || j.Done() }); err != nil {
		return err
	}
	if has() {
		return nil
	}
	return fmt.Errorf("vm: job %s ended before marking %q", j.ID, name)
}

// ParseRC decodes the guest's "<exit code> <elapsed ms>" result line.
func ParseRC(s string) (Result, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return Result{}, fmt.Errorf("bad rc line %q", s)
	}
	code, err := strconv.Atoi(f[0])
	if err != nil {
		return Result{}, fmt.Errorf("bad exit code in %q", s)
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || ms < 0 {
		return Result{}, fmt.Errorf("bad elapsed time in %q", s)
	}
	return Result{Code: code, Elapsed: time.Duration(ms) * time.Millisecond}, nil
}

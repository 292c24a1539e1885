//go:build linux

package netns

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"softib/internal/stats"
)

// RelayStats counts what a relay link did with frames.
type RelayStats struct {
	Forwarded  stats.Counter // frames written to the far side (copies included)
	Dropped    stats.Counter // frames lost to Netem.Loss
	Duplicated stats.Counter // extra copies made
	Corrupted  stats.Counter // frames with a flipped bit
	Reordered  stats.Counter // frames sent ahead of delayed ones
	Errors     stats.Counter // frames the far tap refused
}

// relay joins two TAP devices through this process and applies Netem
// impairments in userspace, for kernels without sch_netem.
//
//	tap A ──read──▶ impair(faults[0]) ──▶ delay line ──write──▶ tap B
//	tap B ──read──▶ impair(faults[1]) ──▶ delay line ──write──▶ tap A
type relay struct {
	files [2]*os.File
	stats RelayStats

	mu     sync.Mutex // guards faults and rngs
	faults [2]Netem
	rngs   [2]*rand.Rand

	done chan struct{}
	wg   sync.WaitGroup
}

// openTap creates TAP device name in the calling thread's namespace and
// returns it as a pollable file. The device vanishes when it is closed.
func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "tap:"+name), nil
}

func newRelay(a, b *os.File, seed uint64) *relay {
	r := &relay{files: [2]*os.File{a, b}, done: make(chan struct{})}
	r.rngs[0] = rand.New(rand.NewPCG(seed, 1))
	r.rngs[1] = rand.New(rand.NewPCG(seed, 2))
	for dir := range 2 {
		line := make(chan frame, 1024)
		r.wg.Add(2)
		go r.pump(dir, line)
		go r.deliver(r.files[1-dir], line)
	}
	return r
}

// close stops the relay and removes the TAP devices.
func (r *relay) close() {
	close(r.done)
	for _, f := range r.files {
		f.Close() // unblocks the pumps
	}
	r.wg.Wait()
}

func (r *relay) set(dir int, n Netem) {
	r.mu.Lock()
	r.faults[dir] = n
	r.mu.Unlock()
}

// frame is a frame on its way to the far side.
type frame struct {
	due  time.Time
	seq  uint64
	data []byte
}

// pump reads frames from files[dir], impairs them and queues them on
// line.
func (r *relay) pump(dir int, line chan<- frame) {
	defer r.wg.Done()
	defer close(line)
	buf := make([]byte, 65536+14)
	var seq uint64
	for {
		n, err := r.files[dir].Read(buf)
		if err != nil {
			return
		}
		r.mu.Lock()
		f, rng := r.faults[dir], r.rngs[dir]
		loss, dup, corrupt, reorder := rng.Float64()*100, rng.Float64()*100, rng.Float64()*100, rng.Float64()*100
		delay := f.Delay
		if f.Jitter > 0 {
			delay += time.Duration(rng.Int64N(int64(2*f.Jitter)+1)) - f.Jitter
		}
		delay = max(delay, 0)
		bit := rng.IntN(8 * max(n-14, 1))
		r.mu.Unlock()
		if loss < f.Loss {
			r.stats.Dropped.Inc()
			continue
		}
		data := append([]byte(nil), buf[:n]...)
		if corrupt < f.Corrupt && n > 14 {
			// Leave the Ethernet header alone so the frame is still
			// delivered, as netem's bit flips in the packet would be.
			data[14+bit/8] ^= 1 << (bit % 8)
			r.stats.Corrupted.Inc()
		}
		if reorder < f.Reorder && delay > 0 {
			// netem: a reordered packet skips the delay.
			delay = 0
			r.stats.Reordered.Inc()
		}
		now := time.Now()
		copies := 1
		if dup < f.Duplicate {
			copies = 2
			r.stats.Duplicated.Inc()
		}
		for range copies {
			seq++
			select {
			case line <- frame{due: now.Add(delay), seq: seq, data: data}:
			case <-r.done:
				return
			}
		}
	}
}

// deliver writes frames to out when they are due, earliest first.
func (r *relay) deliver(out *os.File, line <-chan frame) {
	defer r.wg.Done()
	var q frameHeap
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		for len(q) > 0 && !q[0].due.After(time.Now()) {
			f := q.pop()
			if _, err := out.Write(f.data); err != nil {
				r.stats.Errors.Inc()
			} else {
				r.stats.Forwarded.Inc()
			}
		}
		var wake <-chan time.Time
		if len(q) > 0 {
			timer.Reset(time.Until(q[0].due))
			wake = timer.C
		}
		select {
		case f, ok := <-line:
			if !ok {
				return
			}
			q.push(f)
		case <-wake:
		case <-r.done:
			return
		}
	}
}

// frameHeap is a min-heap of frames by (due, seq).
type frameHeap []frame

func (a *frame) before(b *frame) bool {
	if a.due.Equal(b.due) {
		return a.seq < b.seq
	}
	return a.due.Before(b.due)
}

func (h *frameHeap) push(f frame) {
	*h = append(*h, f)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].before(&s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *frameHeap) pop() frame {
	s := *h
	f := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = frame{}
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].before(&s[m]) {
			m = l
		}
		if r < len(s) && s[r].before(&s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return f
}

package mad

import (
	"math/bits"
	"time"
)

// Timeout is a 5-bit IBTA timeout exponent (LocalAckTimeout, the CM
// response timeouts, ServiceTimeout, TargetAckDelay, packet life time):
// it means 4.096 µs × 2^t (IBTA Vol 1 §12.7.34, ib-cm.md §7.1).
type Timeout uint8

// MaxTimeout is the largest 5-bit timeout exponent.
const MaxTimeout Timeout = 31

// Duration returns 4.096 µs × 2^t. Values above 31 are clamped to 31.
func (t Timeout) Duration() time.Duration {
	return 4096 * time.Nanosecond << min(t, MaxTimeout)
}

// TimeoutFor returns the smallest exponent whose duration is at least d
// (0 for d <= 4.096 µs, 31 when d is beyond the encodable range).
func TimeoutFor(d time.Duration) Timeout {
	if d <= 4096*time.Nanosecond {
		return 0
	}
	q := (uint64(d) + 4095) / 4096 // ceil(d / 4.096 µs)
	t := bits.Len64(q - 1)         // ceil(log2(q))
	if t > int(MaxTimeout) {
		return MaxTimeout
	}
	return Timeout(t)
}

// AckTimeout returns the local ACK timeout the Linux CM puts into a REQ
// path (cm_ack_timeout): the sum of the HCA ACK delay and twice the packet
// life time, both as exponents, rounded to an exponent. The round trip
// plt+1 and the delay are combined as the larger of the two, plus one
// when they are within one of each other (then the sum approaches the
// next power of two), capped at 31.
func AckTimeout(caAckDelay, packetLifeTime Timeout) Timeout {
	rt := int(packetLifeTime) + 1
	d := int(caAckDelay)
	t := max(rt, d)
	if rt-d <= 1 && d-rt <= 1 {
		t++
	}
	return Timeout(min(t, int(MaxTimeout)))
}

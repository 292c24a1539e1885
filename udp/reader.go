package udp

// Reader reads a Conn without blocking, for a consumer that polls (a
// busy-polling CQ, or one that takes over the receive while it spins)
// alongside a goroutine that parks until datagrams arrive. It is the
// receive seam shared by production and tests: *PollReader implements it
// over a Linux Socket (recvmmsg, GRO split), and udp/udptest's endpoints
// implement it over the simulated network, so a consumer written against
// Reader runs the same receive path in both.
//
// A Reader is not safe for concurrent use: its caller serialises every
// method (rxe does so with its receive token). Every datagram fills
// exactly one Message; one that cannot be handed out whole gets N = -1.
type Reader interface {
	// TryRead receives into msgs without blocking and returns how many
	// it filled; 0 means nothing was pending or queued. After Close it
	// returns an error wrapping net.ErrClosed.
	TryRead(msgs []Message) (int, error)
	// Wait calls ready until it returns true, parking while nothing is
	// readable in between. ready reads with ReadNow or ReadNowOne and
	// may return false only after such a read returned 0 (nothing
	// pending and nothing queued): readiness is edge-triggered, so data
	// queued before that read raises no new wakeup. Wait calls ready
	// once before it first parks, and returns an error when the Conn is
	// closed.
	Wait(ready func() bool) error
	// ReadNow is TryRead for use inside Wait's callback.
	ReadNow(msgs []Message) (int, error)
	// ReadNowOne is ReadNow asking for one datagram (or one GRO
	// super-datagram, still split into up to len(msgs) messages): after
	// a wakeup for a lone datagram it spares a second, failing dequeue.
	ReadNowOne(msgs []Message) (int, error)
	// Pending reports whether datagrams of an earlier read wait for the
	// next TryRead or ReadNow without raising readiness: a caller that
	// stops reading while they do must make sure someone reads again.
	Pending() bool
}

// PollConn is a Conn that can also be read through Readers. A Conn read
// through a Reader must not be read with ReadBatch.
type PollConn interface {
	Conn
	// NewReader returns a Reader of up to batch datagrams per read, or
	// nil if the Conn cannot give one (batch < 1, or no raw access to
	// the descriptor).
	NewReader(batch int) Reader
}

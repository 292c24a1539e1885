package rxe

import "softib/udp"

// newPollSock returns the non-blocking reader of c, or nil when c is not
// a Linux *udp.Socket (other Conns keep the plain receive loop).
func newPollSock(c udp.Conn, batch int) pollSock {
	s, ok := c.(*udp.Socket)
	if !ok {
		return nil
	}
	if r := s.PollReader(batch); r != nil {
		return r
	}
	return nil
}

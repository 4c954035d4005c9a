package ss

import (
	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/record"
)

// Record completes the socket's sample into a tcp_sample/1 record: the client's prefix, the
// salted connection id and the host fields. The raw addresses go no further.
func (s Socket) Record(key anon.SockIDer, meta record.Meta) record.TCPSample {
	r := s.Sample
	meta.StampTCP(&r)
	r.PeerPrefix = anon.PeerPrefix(s.Peer.Addr())
	r.SockID = key.SockIDOf(s.Local, s.Peer, s.Cookie)
	return r
}

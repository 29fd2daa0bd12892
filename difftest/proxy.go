package difftest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// proxy sits between the frontend and the backend (the frontend's
// --backend) and records in a history every answer the backend gives the
// frontend: what the frontend may still serve, aged, after the cluster
// changed. It relays DNS over TCP (two-byte length prefix, RFC 1035
// §4.2.2) unchanged, in both directions.
type proxy struct {
	l       net.Listener
	backend string
	hist    *history
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

// startProxy listens on a free loopback port and relays to backend.
func startProxy(backend string, hist *history) (*proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{l: l, backend: backend, hist: hist, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's address.
func (p *proxy) Addr() string { return p.l.Addr().String() }

// Close stops the proxy and its connections.
func (p *proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.backend)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, true)
		p.track(b, true)
		// Queries by ID on this connection, so that an answer is keyed
		// by the DO and CD bits of its query.
		var mu sync.Mutex
		asked := map[uint16]*dns.Msg{}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer b.Close()
			relay(c, b, func(m *dns.Msg) {
				mu.Lock()
				asked[m.Id] = m
				mu.Unlock()
			})
		}()
		go func() {
			defer p.wg.Done()
			defer c.Close()
			defer p.track(c, false)
			defer p.track(b, false)
			relay(b, c, func(m *dns.Msg) {
				mu.Lock()
				q := asked[m.Id]
				delete(asked, m.Id)
				mu.Unlock()
				if q != nil {
					p.hist.add(q, m, time.Now())
				}
			})
		}()
	}
}

// relay copies length-prefixed DNS messages from src to dst, passing each
// one it can parse to seen.
func relay(src, dst net.Conn, seen func(*dns.Msg)) {
	var lenBuf [2]byte
	for {
		if _, err := io.ReadFull(src, lenBuf[:]); err != nil {
			return
		}
		buf := make([]byte, 2+int(binary.BigEndian.Uint16(lenBuf[:])))
		copy(buf, lenBuf[:])
		if _, err := io.ReadFull(src, buf[2:]); err != nil {
			return
		}
		m := new(dns.Msg)
		if m.Unpack(buf[2:]) == nil {
			seen(m)
		}
		if _, err := dst.Write(buf); err != nil {
			if !errors.Is(err, net.ErrClosed) {
				return
			}
			return
		}
	}
}

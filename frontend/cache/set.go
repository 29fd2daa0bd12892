package cache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/miekg/dns"

	"github.com/nodedns/nodedns/frontend/dnswire"
)

// ErrUnpackable means the backend's answer cannot be turned into wire bytes
// for the question (an extended rcode without OPT, or a name that does not
// survive packing).
var ErrUnpackable = errors.New("answer cannot be packed for the question")

// Set builds an entry for key (from dnswire.Query.Key) from resp, the
// backend's answer, and stores it when it may be cached. resp is not
// modified: it may be shared with other callers. The returned entry answers
// the query through Write even when it was not stored. The caller has
// checked that resp answers key's question.
func (c *Cache) Set(key []byte, resp *dns.Msg) (*Entry, error) {
	e, err := c.build(key, resp, c.now())
	if err != nil {
		return nil, err
	}
	if e.kind != noCache {
		c.insert(e)
	}
	return e, nil
}

func (c *Cache) build(key []byte, resp *dns.Msg, now int64) (*Entry, error) {
	wname := dnswire.KeyName(key)
	qtype, qclass, _ := dnswire.KeyQuestion(key)
	name, _, err := dns.UnpackDomainName(wname, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnpackable, err)
	}
	if resp.Rcode > 0xf {
		// The extended bits live in the OPT record, which is per client.
		return nil, fmt.Errorf("%w: extended rcode %d", ErrUnpackable, resp.Rcode)
	}

	// A shallow copy: the records are shared and only read by Pack.
	m := *resp
	m.Id = 0
	m.Response = true
	m.Opcode = dns.OpcodeQuery
	// An NXDOMAIN without answer records is packed without compression,
	// so that its records carry over as they are to the denial of a name
	// under it (Cache.Below), whose question is longer.
	m.Compress = !nxdomainOnly(resp)
	m.Question = []dns.Question{{Name: name, Qtype: qtype, Qclass: qclass}}
	if hasOPT(resp.Extra) {
		m.Extra = make([]dns.RR, 0, len(resp.Extra)-1)
		for _, rr := range resp.Extra {
			if rr.Header().Rrtype != dns.TypeOPT {
				m.Extra = append(m.Extra, rr)
			}
		}
	}
	packed, err := m.Pack()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnpackable, err)
	}
	if len(packed) < dnswire.HeaderLen+len(wname)+4 || !bytes.Equal(packed[dnswire.HeaderLen:dnswire.HeaderLen+len(wname)], wname) {
		return nil, fmt.Errorf("%w: question %q packs differently", ErrUnpackable, name)
	}
	// miekg/dns packs some records it unpacked from garbage (an SOA with
	// empty RDATA) into bytes it cannot read back; never store those.
	if err := new(dns.Msg).Unpack(packed); err != nil {
		return nil, fmt.Errorf("%w: packed answer does not unpack: %w", ErrUnpackable, err)
	}
	offs, err := dnswire.TTLOffsets(packed, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnpackable, err)
	}

	// One allocation holds the key, the answer and its TTL offsets.
	data := make([]byte, 0, len(key)+len(packed)+2*len(offs))
	data = append(append(data, key...), packed...)
	for _, off := range offs {
		data = binary.BigEndian.AppendUint16(data, off)
	}
	e := &Entry{
		hash:   maphash.Bytes(c.seed, key),
		data:   data,
		keyLen: uint16(len(key)),
		nTTL:   uint16(len(offs)),
		stored: now,
	}
	msg := e.msg()

	kind, limit := c.classify(&m)
	ttl := uint32(maxTTL)
	for _, off := range offs {
		t := binary.BigEndian.Uint32(msg[off:])
		if t > maxTTL {
			t = 0 // RFC 2181 §8: values with the top bit set mean zero
		}
		t = min(t, limit)
		if kind == Success || kind == Denial {
			t = max(t, secs(c.cfg.MinTTL))
		}
		binary.BigEndian.PutUint32(msg[off:], t)
		ttl = min(ttl, t)
	}
	if kind == Denial || kind == ServFail {
		ttl = limit // the negative TTL holds even with no record to carry it
	}
	if ttl == 0 || ttl == maxTTL || resp.Truncated || len(packed) > c.cfg.MaxEntrySize {
		kind = noCache
	}
	e.kind, e.ttl = kind, ttl
	e.expiry = now + int64(ttl)*int64(time.Second)
	e.staleT = e.expiry
	if kind != ServFail {
		e.staleT += int64(c.cfg.ServeStale)
	}
	return e, nil
}

// nxdomainOnly reports whether m is an NXDOMAIN without answer records.
func nxdomainOnly(m *dns.Msg) bool { return m.Rcode == dns.RcodeNameError && len(m.Answer) == 0 }

// maxTTL is the largest TTL (RFC 2181 §8).
const maxTTL = 1<<31 - 1

func secs(d time.Duration) uint32 { return uint32(d / time.Second) }

func hasOPT(rrs []dns.RR) bool {
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			return true
		}
	}
	return false
}

package gate

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/miekg/dns"
)

// Defaults for Config fields left at their zero value.
const (
	// DefaultBackend is the backend's DNS listener for the frontend.
	DefaultBackend = "127.0.0.1:5300"
	// DefaultReadyURL is CoreDNS's ready plugin on the backend. It is the
	// default of the --backend-ready-url flag; in Config an empty ReadyURL
	// turns the HTTP probe off.
	DefaultReadyURL = "http://127.0.0.1:8181/ready"
	// DefaultProbeName and DefaultProbeType make the DNS probe ask
	// "in-addr.arpa. SOA", which the backend's kubernetes plugin answers
	// from memory, as the upstream pool's probes do: a question that went
	// upstream (". NS") would make a slow upstream resolver look like a
	// backend that does not answer, and hold up the takeover.
	DefaultProbeName = "in-addr.arpa."
	DefaultProbeType = dns.TypeSOA
	// DefaultInterval is the time between probes: a restarted backend is
	// noticed within a second, at the cost of two loopback requests.
	DefaultInterval = time.Second
)

// Config configures a Gate. Zero values take the defaults above, except
// ReadyURL.
type Config struct {
	// Backend is the backend's TCP DNS address. Default DefaultBackend.
	Backend string
	// ReadyURL is the backend's readiness URL, http:// only (no TLS, no
	// proxy, no redirects); any status but 200 means not ready. Empty: no
	// HTTP probe, the DNS probe alone decides.
	ReadyURL string
	// ProbeName and ProbeType form the DNS probe's question.
	// Defaults DefaultProbeName and DefaultProbeType.
	ProbeName string
	ProbeType uint16
	// Interval is the time between probes. Default DefaultInterval.
	Interval time.Duration
	// Timeout bounds each probe. Default Interval.
	Timeout time.Duration
	// OnChange, when set, is called with the new state each time readiness
	// changes, on the probing goroutine (so calls never overlap); it must
	// not block.
	OnChange func(ready bool, detail string)
}

func (c Config) withDefaults() Config {
	if c.Backend == "" {
		c.Backend = DefaultBackend
	}
	if c.ProbeName == "" {
		c.ProbeName = DefaultProbeName
	}
	if c.ProbeType == 0 {
		c.ProbeType = DefaultProbeType
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout == 0 {
		c.Timeout = c.Interval
	}
	return c
}

// Validate reports every invalid field of c after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if _, _, err := net.SplitHostPort(c.Backend); err != nil {
		errs = append(errs, fmt.Errorf("backend %q: %w", c.Backend, err))
	}
	if c.ReadyURL != "" {
		if _, err := ParseReadyURL(c.ReadyURL); err != nil {
			errs = append(errs, err)
		}
	}
	if _, ok := dns.IsDomainName(c.ProbeName); !ok {
		errs = append(errs, fmt.Errorf("probe name %q: not a domain name", c.ProbeName))
	}
	if c.Interval < 0 || c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("interval %v, timeout %v: must be positive", c.Interval, c.Timeout))
	}
	return errors.Join(errs...)
}

// ParseReadyURL parses a readiness URL as the HTTP probe needs it:
// http://host[:port]/path. Other schemes, https:// included, are errors:
// the probe speaks plain HTTP over its own connection, since the backend's
// readiness endpoint is on the node and an HTTP client with TLS would add
// about half a megabyte to a binary that runs on every node.
func ParseReadyURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("ready url: %w", err)
	case u.Scheme != "http":
		return nil, fmt.Errorf("ready url %q: scheme %q not supported, want http://host:port/path (plain HTTP only)", s, u.Scheme)
	case u.Host == "":
		return nil, fmt.Errorf("ready url %q: no host, want http://host:port/path", s)
	}
	return u, nil
}

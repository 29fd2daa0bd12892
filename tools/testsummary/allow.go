package main

import "regexp"

// allowedSkip is a skip reason that strict mode (NODEDNS_STRICT_SKIPS=1,
// set by .ci/run) accepts: one that no machine of the kind the suite runs
// on (DESIGN.md "This machine": 2 cores, root, every Debian package of
// tools/deps.sh installed) can meet. Any other skip there means a tier that
// should have run did not.
type allowedSkip struct {
	pattern *regexp.Regexp
	why     string
}

// allowedSkips is the one list of such reasons. Each entry matches the
// message of the t.Skip that gives it, and says why no run of `make test`
// on this kind of machine can meet it. Keep it short: a skip that root and
// the packages would cure does not belong here.
var allowedSkips = []allowedSkip{
	// The kernel of this kind of machine has no IPVS: kube-proxy's IPVS
	// mode and the link-local mode's IPVS setups cannot be exercised.
	{regexp.MustCompile(`(?i)\bno IPVS\b|\bIPVS\b.*\bnot (available|supported)\b`),
		"the kernel has no IPVS (DESIGN.md, This machine)"},
	// The same kernel has no dummy link type; nodenet falls back to a
	// bridge and tests the fallback, and a test of the dummy path itself
	// can only skip.
	{regexp.MustCompile(`(?i)\bno .?dummy.? link type\b|\bdummy\b.*\bnot supported\b`),
		"the kernel has no dummy link type (DESIGN.md, This machine)"},
	// frontend/server's TestHitCPU is a measurement (docs/performance.md),
	// run by hand for a set number of seconds; the suite never asks for it.
	{regexp.MustCompile(`^set NODEDNS_MEASURE_SECONDS to measure$`),
		"an opt-in measurement (NODEDNS_MEASURE_SECONDS), not part of the suite"},
	// backend's memory study builds clusters of thousands of Services
	// (docs/backend-memory.md); it runs only with -memstudy.
	{regexp.MustCompile(`^memory study: pass -memstudy$`),
		"an opt-in study (-memstudy), not part of the suite"},
}

// skipAllowed returns why reason is acceptable in strict mode, or "".
func skipAllowed(reason string) string {
	for _, a := range allowedSkips {
		if a.pattern.MatchString(reason) {
			return a.why
		}
	}
	return ""
}

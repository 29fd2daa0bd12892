package nodenet

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// CommentPrefix starts the comment of every rule nodedns installs. Rules
// carrying it belong to nodedns: a sync deletes those it no longer wants,
// even when an earlier instance with another configuration installed them.
const CommentPrefix = "nodedns:"

// Family is an IP family served by one iptables binary.
type Family int

// Families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

func familyOf(ip net.IP) Family {
	if ip.To4() != nil {
		return IPv4
	}
	return IPv6
}

// Rule is one iptables rule as data. Every rule nodedns installs sits at the
// top of its chain (in the order Rules returns them): NOTRACK must run
// before anything that would create conntrack state or DNAT the ClusterIP,
// and ACCEPT before any DROP a host firewall or kube-proxy inserts.
type Rule struct {
	Family  Family
	Table   string
	Chain   string
	Comment string   // unique within its chain; starts with CommentPrefix
	Spec    []string // complete rulespec, including the comment match
}

func (r Rule) String() string {
	return fmt.Sprintf("%s %s/%s %s", r.Family, r.Table, r.Chain, strings.Join(r.Spec, " "))
}

// Rules returns the rules cfg needs, grouped by (family, table, chain) in
// installation order. cfg must have been validated.
func Rules(cfg Config) []Rule {
	var rules []Rule
	add := func(ip net.IP, table, chain, what string, spec ...string) {
		comment := CommentPrefix + " " + what
		target := "ACCEPT"
		if table == "raw" {
			target = "NOTRACK"
		}
		full := append(append([]string(nil), spec...), "-m", "comment", "--comment", comment, "-j", target)
		rules = append(rules, Rule{Family: familyOf(ip), Table: table, Chain: chain, Comment: comment, Spec: full})
	}
	dns := strconv.Itoa(cfg.DNSPort)
	health := strconv.Itoa(cfg.HealthPort)
	for _, ip := range cfg.OwnedIPs() {
		a := ip.String()
		dnsAddr, healthAddr := net.JoinHostPort(a, dns), net.JoinHostPort(a, health)
		for _, proto := range []string{"udp", "tcp"} {
			// Queries from pods arrive through PREROUTING; those from
			// hostNetwork processes through OUTPUT; answers leave through
			// OUTPUT. None of them may create a conntrack entry.
			add(ip, "raw", "PREROUTING", fmt.Sprintf("notrack %s to %s", proto, dnsAddr),
				"-d", a, "-p", proto, "--dport", dns)
			add(ip, "raw", "OUTPUT", fmt.Sprintf("notrack %s to %s", proto, dnsAddr),
				"-d", a, "-p", proto, "--dport", dns)
			add(ip, "raw", "OUTPUT", fmt.Sprintf("notrack %s from %s", proto, dnsAddr),
				"-s", a, "-p", proto, "--sport", dns)
			// Untracked packets match no ESTABLISHED rule of a host
			// firewall: accept them explicitly.
			add(ip, "filter", "INPUT", fmt.Sprintf("accept %s to %s", proto, dnsAddr),
				"-d", a, "-p", proto, "--dport", dns)
			add(ip, "filter", "OUTPUT", fmt.Sprintf("accept %s from %s", proto, dnsAddr),
				"-s", a, "-p", proto, "--sport", dns)
		}
		if cfg.HealthPort != 0 {
			// kubelet probes the health port from the host network.
			add(ip, "raw", "OUTPUT", fmt.Sprintf("notrack tcp to %s", healthAddr),
				"-d", a, "-p", "tcp", "--dport", health)
			add(ip, "raw", "OUTPUT", fmt.Sprintf("notrack tcp from %s", healthAddr),
				"-s", a, "-p", "tcp", "--sport", health)
		}
	}
	if ip, port, _ := cfg.loopbackBackend(); ip != nil {
		// Misses go to the backend over loopback TCP. Both directions are
		// sent by a local process, so both pass raw OUTPUT, where loopback
		// traffic gets its conntrack entry (kept with the packet across
		// lo, so PREROUTING adds none); both also arrive through INPUT.
		a, p := ip.String(), strconv.Itoa(port)
		addr := net.JoinHostPort(a, p)
		add(ip, "raw", "OUTPUT", "notrack tcp to backend "+addr, "-d", a, "-p", "tcp", "--dport", p)
		add(ip, "raw", "OUTPUT", "notrack tcp from backend "+addr, "-s", a, "-p", "tcp", "--sport", p)
		add(ip, "filter", "INPUT", "accept tcp to backend "+addr, "-d", a, "-p", "tcp", "--dport", p)
		add(ip, "filter", "INPUT", "accept tcp from backend "+addr, "-s", a, "-p", "tcp", "--sport", p)
		add(ip, "filter", "OUTPUT", "accept tcp to backend "+addr, "-d", a, "-p", "tcp", "--dport", p)
		add(ip, "filter", "OUTPUT", "accept tcp from backend "+addr, "-s", a, "-p", "tcp", "--sport", p)
	}
	return groupRules(rules)
}

// chainKey identifies one chain of one family.
type chainKey struct {
	Family Family
	Table  string
	Chain  string
}

func (r Rule) key() chainKey { return chainKey{r.Family, r.Table, r.Chain} }

// groupRules orders rules by chain, keeping their relative order, so that
// each chain's rules form one contiguous block.
func groupRules(rules []Rule) []Rule {
	var keys []chainKey
	by := map[chainKey][]Rule{}
	for _, r := range rules {
		k := r.key()
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	out := make([]Rule, 0, len(rules))
	for _, k := range keys {
		out = append(out, by[k]...)
	}
	return out
}

// ruleComment returns the nodedns comment of one line of `iptables -S`
// output, or "" when the line is not a nodedns rule.
func ruleComment(line string) string {
	const marker = `--comment "`
	i := strings.Index(line, marker+CommentPrefix)
	if i < 0 {
		// iptables prints a one-word comment without quotes; ours always
		// have several words.
		return ""
	}
	rest := line[i+len(marker):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}

// parseRuleLine turns "-A CHAIN args..." as printed by `iptables -S` into
// the chain and the rulespec that deletes it. Quoted words (comments) are
// unquoted.
func parseRuleLine(line string) (chain string, spec []string, err error) {
	words, err := splitWords(line)
	if err != nil {
		return "", nil, err
	}
	if len(words) < 2 || words[0] != "-A" {
		return "", nil, fmt.Errorf("not a rule: %q", line)
	}
	return words[1], words[2:], nil
}

// splitWords splits like a shell for the quoting iptables-save emits:
// double quotes, with \" and \\ escaped inside.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, inQuote := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote && c == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\'):
			cur.WriteByte(s[i+1])
			i++
		case c == '"':
			inQuote = !inQuote
			inWord = true
		case !inQuote && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

package bench

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/miekg/dns"
)

// Query is one line of the query file.
type Query struct {
	Name  string // fully qualified
	Qtype uint16 // dns.TypeA or dns.TypeAAAA
}

// nxPrefix starts the first label of the names the fake backend answers
// with NXDOMAIN.
const nxPrefix = "nx-"

// nxEvery makes one name in nxEvery an NXDOMAIN name, so negative caching
// is exercised the way search-path expansion exercises it in a cluster.
const nxEvery = 100

// Queries returns n distinct names shaped like Kubernetes Service names,
// alternating A and AAAA; one in nxEvery does not exist.
func Queries(n int) []Query {
	qs := make([]Query, n)
	for i := range qs {
		label := "svc"
		if i%nxEvery == nxEvery-1 {
			label = strings.TrimSuffix(nxPrefix, "-")
		}
		qs[i].Name = fmt.Sprintf("%s-%05d.ns-%02d.svc.cluster.local.", label, i, i%50)
		qs[i].Qtype = dns.TypeA
		if i%2 == 1 {
			qs[i].Qtype = dns.TypeAAAA
		}
	}
	return qs
}

// WriteQueryFile writes qs in dnsperf's input format: "name type" per line.
func WriteQueryFile(path string, qs []Query) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create query file: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, q := range qs {
		fmt.Fprintf(w, "%s %s\n", q.Name, dns.TypeToString[q.Qtype])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write query file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write query file: %w", err)
	}
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/nodedns/nodedns/loadtest/gen"
)

// runLoad is `nodedns-loadtest load`: the load generator on its own.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := gen.DefaultConfig()
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Server, "server", "127.0.0.1:53", "nameserver IP:port (the pods' resolv.conf nameserver)")
	fs.IntVar(&cfg.Rate, "rate", 0, "lookups per second (open loop); 0 runs closed-loop, each pod one lookup after the other")
	fs.IntVar(&cfg.Pods, "pods", cfg.Pods, "simulated pods (closed loop: concurrent lookups)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the run")
	mix := fs.String("mix", "default", "names: built-in mixes ("+strings.Join(gen.BuiltinMixes(), ", ")+") or file:PATH, comma-separated, each optionally :WEIGHT")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "the pods' namespace (first search domain)")
	fs.StringVar(&cfg.ClusterDomain, "cluster-domain", cfg.ClusterDomain, "cluster domain of the search list")
	search := fs.String("search", "", "search list, comma-separated (default NAMESPACE.svc.DOMAIN,svc.DOMAIN,DOMAIN); `none` for no search")
	fs.IntVar(&cfg.Ndots, "ndots", cfg.Ndots, "resolv.conf ndots")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "wait for the answers of one attempt (resolv.conf timeout)")
	fs.IntVar(&cfg.Attempts, "attempts", cfg.Attempts, "attempts per query (resolv.conf attempts)")
	fs.BoolVar(&cfg.NoAAAA, "no-aaaa", false, "send only A queries (default: A and AAAA in parallel, as getaddrinfo)")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", cfg.MaxInflight, "open loop: outstanding lookups beyond which due lookups are skipped")
	sources := fs.String("source-ips", "", "the pods' source addresses, comma-separated, or FIRST-LAST (IPv4); default: the kernel's choice")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the names drawn (0: random)")
	jsonOut := fs.String("json", "", "also write the result as JSON to this file")
	quiet := fs.Bool("quiet", false, "no per-second progress on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("load: unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.Mix, err = gen.ParseMix(*mix); err != nil {
		return err
	}
	switch *search {
	case "":
	case "none":
		cfg.Search = []string{}
	default:
		cfg.Search = strings.Split(*search, ",")
	}
	if cfg.SourceIPs, err = parseSourceIPs(*sources); err != nil {
		return err
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	res, err := gen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	if *jsonOut == "" {
		return nil
	}
	f, err := os.Create(*jsonOut)
	if err != nil {
		return err
	}
	if err := res.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parseSourceIPs reads "A,B,C" or "FIRST-LAST".
func parseSourceIPs(s string) ([]netip.Addr, error) {
	if s == "" {
		return nil, nil
	}
	if first, last, ok := strings.Cut(s, "-"); ok {
		a, err1 := netip.ParseAddr(first)
		b, err2 := netip.ParseAddr(last)
		if err1 != nil || err2 != nil || !a.Is4() || !b.Is4() || b.Less(a) {
			return nil, fmt.Errorf("source-ips %q: want FIRST-LAST IPv4 addresses, FIRST <= LAST", s)
		}
		var out []netip.Addr
		for ip := a; ; ip = ip.Next() {
			out = append(out, ip)
			if ip == b || len(out) > 65536 {
				break
			}
		}
		return out, nil
	}
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		ip, err := netip.ParseAddr(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("source-ips: %w", err)
		}
		out = append(out, ip)
	}
	return out, nil
}

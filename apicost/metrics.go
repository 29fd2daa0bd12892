package apicost

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics parses the Prometheus text exposition format, keeping only
// samples whose name passes keep. Malformed lines are skipped: the study
// reads a handful of well-known kube-apiserver series.
func parseMetrics(text []byte, keep func(name string) bool) []sample {
	var out []sample
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		nameEnd := strings.IndexAny(line, "{ ")
		if nameEnd <= 0 {
			continue
		}
		s := sample{name: line[:nameEnd], labels: map[string]string{}}
		if !keep(s.name) {
			continue
		}
		rest := line[nameEnd:]
		if rest[0] == '{' {
			var ok bool
			if s.labels, rest, ok = parseLabels(rest[1:]); !ok {
				continue
			}
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.value = v
		out = append(out, s)
	}
	return out
}

// parseLabels parses `a="x",b="y"}` and returns the labels and what follows
// the closing brace.
func parseLabels(s string) (map[string]string, string, bool) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ,")
		if s == "" {
			return nil, "", false
		}
		if s[0] == '}' {
			return labels, s[1:], true
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return nil, "", false
		}
		key := s[:eq]
		s = s[eq+2:]
		var val strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i == len(s) {
			return nil, "", false
		}
		labels[key] = val.String()
		s = s[i+1:]
	}
}

// watchedResources are the resources of the two watch sets: the kubernetes
// plugin's (services, endpointslices, namespaces) and kube-proxy's
// (services, endpointslices, nodes, servicecidrs).
var watchedResources = map[string]bool{
	"services": true, "endpointslices": true, "namespaces": true, "nodes": true, "servicecidrs": true,
}

// apiCounters are the kube-apiserver series the study reads, summed over
// the watched resources.
type apiCounters struct {
	WatchEvents float64            // apiserver_watch_events_total
	WatchBytes  float64            // apiserver_watch_events_sizes_sum
	Watches     float64            // apiserver_longrunning_requests{verb="WATCH"} (a gauge)
	WatchesBy   map[string]float64 // the same by resource
	Lists       float64            // apiserver_request_total{verb="LIST"}
	ListBytes   float64            // apiserver_response_sizes_sum{verb="LIST"}
	// Terminated is apiserver_terminated_watchers_total: watchers the
	// watch cache closed because they did not keep up with its events.
	Terminated float64
}

// apiserverCounters extracts apiCounters from kube-apiserver's /metrics.
// kube-apiserver v1.36 no longer has apiserver_registered_watchers; the
// stable apiserver_longrunning_requests gauge counts open watches instead.
func apiserverCounters(text []byte) apiCounters {
	names := map[string]bool{
		"apiserver_watch_events_total":        true,
		"apiserver_watch_events_sizes_sum":    true,
		"apiserver_longrunning_requests":      true,
		"apiserver_request_total":             true,
		"apiserver_response_sizes_sum":        true,
		"apiserver_terminated_watchers_total": true,
	}
	c := apiCounters{WatchesBy: map[string]float64{}}
	for _, s := range parseMetrics(text, func(n string) bool { return names[n] }) {
		if !watchedResources[s.labels["resource"]] || s.labels["subresource"] != "" {
			continue
		}
		switch s.name {
		case "apiserver_terminated_watchers_total":
			c.Terminated += s.value
		case "apiserver_watch_events_total":
			c.WatchEvents += s.value
		case "apiserver_watch_events_sizes_sum":
			c.WatchBytes += s.value
		case "apiserver_longrunning_requests":
			if s.labels["verb"] == "WATCH" {
				c.Watches += s.value
				c.WatchesBy[s.labels["resource"]] += s.value
			}
		case "apiserver_request_total":
			if s.labels["verb"] == "LIST" {
				c.Lists += s.value
			}
		case "apiserver_response_sizes_sum":
			if s.labels["verb"] == "LIST" {
				c.ListBytes += s.value
			}
		}
	}
	return c
}

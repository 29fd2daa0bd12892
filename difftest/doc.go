// Package difftest is the differential suite of nodedns (`make difftest`):
// a real kube-apiserver holds a cluster state covering the Kubernetes DNS
// specification, the real backend (CoreDNS with the chart's Corefile, for
// each Corefile shape the chart renders) answers it, and the real frontend
// runs in front of it with the flags the chart gives it for that shape.
// Pods' stub resolvers (glibc's and musl's search-path walks) and direct
// clients send every query both to the frontend and straight to the
// backend; any difference other than TTL aging fails, and so does a name
// reaching the upstream that no client asked. README.md says what it
// checks and how.
package difftest

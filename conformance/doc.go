// Package conformance runs Kubernetes' own `[sig-network] DNS` e2e specs
// (k8s.io/kubernetes v1.36.3 test/e2e/network/dns.go and dns_common.go,
// through the e2e.test of tools/k8s/e2e) on two real kubelet nodes of the
// testbed, once per DNS design: nodedns in iptables, link-local and node-ip
// mode, and kubeadm's CoreDNS Deployment as the control. `make conformance`
// runs it; README.md says what it prints.
package conformance

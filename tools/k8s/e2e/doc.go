// Package e2e is a small Kubernetes e2e suite: the framework of
// k8s.io/kubernetes/test/e2e with only the sig-network specs linked in
// (test/e2e/network, which holds dns.go and dns_common.go). Its test binary
// takes e2e.test's flags (--provider, --kubeconfig, --kubectl-path,
// --report-dir, --ginkgo.focus, ...) and runs the same specs with the same
// suite start-up checks, and it builds in a fraction of the time of the full
// e2e.test, which links every SIG's specs and the cloud providers.
//
// Build: tools/k8s/build.sh e2e (the binary is cached as e2e.test beside
// the other Kubernetes binaries). The conformance runner (conformance/) uses it.
package e2e

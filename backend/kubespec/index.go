package kubespec

import "github.com/coredns/coredns/plugin/kubernetes/object"

// The index functions of the stores: keys the kubernetes plugin looks its
// records up by. Stored objects are not modified, so the values are
// returned without a copy.

func serviceIPs(s *object.Service) []string         { return s.ClusterIPs }
func serviceExternalIPs(s *object.Service) []string { return s.ExternalIPs }
func endpointsKey(e *object.Endpoints) []string     { return []string{e.Index} }
func endpointsIPs(e *object.Endpoints) []string     { return e.IndexIP }
func podIPs(p *object.Pod) []string                 { return p.PodIPs }

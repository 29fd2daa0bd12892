package kubespec

import (
	"fmt"
	"slices"

	"github.com/coredns/coredns/plugin/kubernetes/object"
)

// The index functions of the stores: keys the kubernetes plugin looks its
// records up by.

func serviceKey(obj any) ([]string, error) {
	s, ok := obj.(*object.Service)
	if !ok {
		return nil, fmt.Errorf("service index: got %T", obj)
	}
	return []string{s.Index}, nil
}

func serviceIPs(obj any) ([]string, error) {
	s, ok := obj.(*object.Service)
	if !ok {
		return nil, fmt.Errorf("service IP index: got %T", obj)
	}
	return slices.Clone(s.ClusterIPs), nil
}

func serviceExternalIPs(obj any) ([]string, error) {
	s, ok := obj.(*object.Service)
	if !ok {
		return nil, fmt.Errorf("service external IP index: got %T", obj)
	}
	return slices.Clone(s.ExternalIPs), nil
}

func endpointsKey(obj any) ([]string, error) {
	e, ok := obj.(*object.Endpoints)
	if !ok {
		return nil, fmt.Errorf("endpoints index: got %T", obj)
	}
	return []string{e.Index}, nil
}

func endpointsIPs(obj any) ([]string, error) {
	e, ok := obj.(*object.Endpoints)
	if !ok {
		return nil, fmt.Errorf("endpoints IP index: got %T", obj)
	}
	return e.IndexIP, nil
}

func podIPs(obj any) ([]string, error) {
	p, ok := obj.(*object.Pod)
	if !ok {
		return nil, fmt.Errorf("pod IP index: got %T", obj)
	}
	return slices.Clone(p.PodIPs), nil
}

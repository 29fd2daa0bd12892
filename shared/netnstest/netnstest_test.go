package netnstest

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestNodePod(t *testing.T) {
	Require(t)
	topo := NodePod(t)
	// A socket opened inside Do belongs to the namespace: the node can
	// reach it, the test's own namespace cannot.
	var ln net.Listener
	if err := topo.Pod.Do(func() (err error) {
		ln, err = net.Listen("tcp", PodIP+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	if err := topo.Node.Do(func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Errorf("node cannot reach a socket made in the pod: %v", err)
	}
	if out := topo.Node.Run("ip", "-o", "link", "show", "pod0"); !strings.Contains(out, "UP") {
		t.Errorf("pod0 not up: %s", out)
	}
}

func TestCleanup(t *testing.T) {
	Require(t, "sleep")
	var name string
	t.Run("inner", func(t *testing.T) {
		n := New(t, "cleanup")
		name = n.Name
		n.Start("sleep", "600")
	})
	out, err := New(t, "probe").Exec("ip", "netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, name) {
		t.Errorf("namespace %s still exists after its test ended", name)
	}
}

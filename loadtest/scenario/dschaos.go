package scenario

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Chaos of the node's DNS pod. For the CoreDNS DaemonSet designs the
// harness plays kubelet's and the DaemonSet controller's part on the Pod
// object (Ready condition, deletion, a new pod); the EndpointSlice
// controller and kube-proxy react for real.
const (
	// crashUp is how long a crash-looping container runs before it
	// crashes again.
	crashUp = 2 * time.Second
	// crashBackoff is kubelet's first back-off of a crash loop: after
	// the second crash the container starts again 10s later.
	crashBackoff = 10 * time.Second
	// startingFor is how long a node's DNS pod is not running yet in
	// "local pod not ready": a new node whose pods already resolve.
	startingFor = 5 * time.Second
)

// dsRestart kills the node's CoreDNS pod's container and starts it again
// down later; notReadyAfter the kill the pod is not ready, and ready again
// once the new CoreDNS's /ready answers.
func (e *Env) dsRestart(ctx context.Context, t *trial, down time.Duration) (string, error) {
	old := t.run.Procs[0]
	old.Kill()
	killed := time.Now()
	time.Sleep(min(notReadyAfter, down))
	err := e.setDSPodReady(ctx, t.node.Name, false)
	time.Sleep(time.Until(killed.Add(down)))
	nu, startErr := old.start()
	if startErr != nil {
		return "", errors.Join(err, startErr)
	}
	t.replace(old, nu)
	if err != nil {
		return "", err
	}
	if err := e.dsBecomeReady(ctx, t.run, t.node); err != nil {
		return "", err
	}
	return fmt.Sprintf("SIGKILL of the node's CoreDNS pod, not ready %v later, started again %v after the kill, ready and in kube-proxy's rules %v after it",
		min(notReadyAfter, down), down, time.Since(killed).Round(100*time.Millisecond)), nil
}

// dsRoll is a DaemonSet RollingUpdate (the default: maxUnavailable 1,
// maxSurge 0) on the node: the old pod is deleted (terminating), its
// CoreDNS gets SIGTERM and serves through its lameduck (5s, kubeadm's
// Corefile), then the pod is gone and the new pod starts and turns ready.
func (e *Env) dsRoll(ctx context.Context, t *trial) (string, error) {
	old, n := t.run.Procs[0], t.node
	start := time.Now()
	if err := e.deleteDSPod(ctx, n.Name, 30); err != nil {
		return "", err
	}
	_ = old.Signal(syscall.SIGTERM)
	waitCtx, cancel := context.WithTimeout(ctx, stopGrace)
	_ = old.Wait(waitCtx)
	cancel()
	old.Kill()
	exited := time.Since(start)
	if err := e.deleteDSPod(ctx, n.Name, 0); err != nil {
		return "", err
	}
	if err := e.waitPodGone(ctx, dsPodName(n.Name)); err != nil {
		return "", err
	}
	if err := e.createDSPod(ctx, dsPod(n.Name, t.run.ds.ip, t.run.ds.kind.label), t.run.ds.ip, n.IP.String(), false); err != nil {
		return "", err
	}
	nu, err := old.start()
	if err != nil {
		return "", err
	}
	t.replace(old, nu)
	if err := e.dsBecomeReady(ctx, t.run, n); err != nil {
		return "", err
	}
	return fmt.Sprintf("old pod deleted, its CoreDNS exited %v after SIGTERM (lameduck); the new pod was ready and in kube-proxy's rules %v after the deletion",
		exited.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond)), nil
}

// waitPodGone waits until the pod object no longer exists.
func (e *Env) waitPodGone(ctx context.Context, name string) error {
	return poll(ctx, nil, 30*time.Second, "Pod "+name+" still exists", func(ctx context.Context) error {
		if _, err := e.tb.Client().CoreV1().Pods("kube-system").Get(ctx, name, metav1.GetOptions{}); err == nil {
			return errors.New("exists")
		}
		return nil
	})
}

// crashLoop crashes the node's front process (the CoreDNS pod of the
// DaemonSet designs) as a crash-looping container: SIGKILL, kubelet
// starts it again restartDelay later, it runs crashUp and crashes again,
// and kubelet waits crashBackoff before the next start.
func crashLoop(ctx context.Context, e *Env, t *trial) (string, error) {
	pp := frontProcess(t)
	ds := t.run.ds != nil
	crash := func(down time.Duration) error {
		if ds {
			_, err := e.dsRestart(ctx, t, down)
			return err
		}
		return e.restartAfter(t, pp, down)
	}
	start := time.Now()
	if err := crash(restartDelay); err != nil {
		return "", err
	}
	time.Sleep(crashUp)
	if err := crash(crashBackoff); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s SIGKILLed, started %v later, SIGKILLed again %v after that and started %v later (kubelet's back-off); back %v after the first crash",
		(*pp).Name, restartDelay, crashUp, crashBackoff, time.Since(start).Round(100*time.Millisecond)), nil
}

// notReady is a node whose DNS pod is not running yet while the node's
// other pods already resolve (a new node, a pod starting): the node's
// front process stops (SIGTERM) and starts startingFor later. For the
// DaemonSet designs the pod exists, not ready, meanwhile.
func notReady(ctx context.Context, e *Env, t *trial) (string, error) {
	pp := frontProcess(t)
	old := *pp
	if t.run.ds != nil {
		old.Kill()
		if err := e.deleteDSPod(ctx, t.node.Name, 0); err != nil {
			return "", err
		}
		if err := e.waitPodGone(ctx, dsPodName(t.node.Name)); err != nil {
			return "", err
		}
		if err := e.createDSPod(ctx, dsPod(t.node.Name, t.run.ds.ip, t.run.ds.kind.label), t.run.ds.ip, t.node.IP.String(), false); err != nil {
			return "", err
		}
	} else {
		_ = old.Stop()
	}
	// Not running from here (a SIGTERMed frontend drains first).
	start := time.Now()
	time.Sleep(startingFor)
	nu, err := old.start()
	if err != nil {
		return "", err
	}
	*pp = nu
	t.replace(old, nu)
	if t.run.ds != nil {
		if err := e.dsBecomeReady(ctx, t.run, t.node); err != nil {
			return "", err
		}
		return fmt.Sprintf("the node's CoreDNS pod replaced by a new one, not running for %v, ready and in kube-proxy's rules %v after the old pod was gone",
			startingFor, time.Since(start).Round(100*time.Millisecond)), nil
	}
	return fmt.Sprintf("%s stopped (SIGTERM; exited after its drain), not running for %v, then started", old.Name, startingFor), nil
}

package testbed

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// childEnv makes the test binary the crashing run of
// TestRealNodeLeftoversOfKilledRun; its value is the pod images' directory.
const childEnv = "NODEDNS_REALNODE_CHILD_IMAGES"

// TestRealNodeLeftoversOfKilledRun: a run SIGKILLed with a pod running
// leaves containers, their shims, cgroups, network namespaces and
// directories (containerd daemonizes the shims, so they outlive it); the
// next run's removeLeftovers removes them all.
func TestRealNodeLeftoversOfKilledRun(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		crashingRun(dir)
		return
	}
	if r := RealNodeUnavailable(); r != "" {
		t.Skip("real nodes: " + r)
	}
	if err := RealNodeBinaries(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	imgDir := t.TempDir()
	if _, err := BuildPodImages(ctx, imgDir); err != nil {
		t.Fatal(err)
	}
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRealNodeLeftoversOfKilledRun$", "-test.v")
	child.Env = append(os.Environ(), childEnv+"="+imgDir)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var statePath string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		l := sc.Text()
		t.Logf("child: %s", l)
		if p, ok := strings.CutPrefix(l, "READY "); ok {
			statePath = p
			break
		}
	}
	if statePath == "" {
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatal("the child run ended before its pod ran")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	b, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatalf("the killed run left no state file: %v", err)
	}
	var s runState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	s.file = statePath
	time.Sleep(time.Second) // the children's Pdeathsig is delivered
	left := s.leftovers()
	t.Logf("left by the killed run: %v", left)
	var procs int
	for _, l := range left {
		if strings.HasPrefix(l, "process ") {
			procs++
		}
	}
	if procs == 0 {
		t.Errorf("the killed run left no process (shims and containers were expected to survive it): %v", left)
	}
	removed, err := removeLeftovers(ctx)
	if err != nil {
		t.Errorf("remove leftovers: %v", err)
	}
	t.Logf("removed: %v", removed)
	if left := s.leftovers(); len(left) > 0 {
		t.Errorf("left after removeLeftovers: %v", left)
	}
}

// crashingRun brings up one node with a running pod, prints the state
// file's path, and waits to be killed.
func crashingRun(imgDir string) {
	fail := func(err error) {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	ctx := context.Background()
	tb, err := Start(ctx, Options{})
	if err != nil {
		fail(err)
	}
	if err := tb.StartControllers(ctx); err != nil {
		fail(err)
	}
	archives := []Archive{{Ref: PauseImage, Path: filepath.Join(imgDir, "pause.oci.tar")}, {Ref: PodToolImage, Path: filepath.Join(imgDir, "podtool.oci.tar")}}
	n, err := tb.AddRealNode(ctx, "node-crash", RealNodeOptions{Images: archives})
	if err != nil {
		fail(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sleeper"},
		Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{
			Name: "pause", Image: PauseImage, ImagePullPolicy: corev1.PullNever,
		}}},
	}
	if _, err := tb.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		fail(err)
	}
	err = waitFor(ctx, "pod running", func() (bool, error) {
		p, err := tb.Client().CoreV1().Pods("default").Get(ctx, "sleeper", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		fail(err)
	}
	fmt.Println("READY " + tb.rstate.file)
	select {}
}

package testbed

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The API server's connections to kubelets and pods (egress.go), tested
// with kubectl as a user runs it against the admin kubeconfig, on a
// `podtool serve` pod on every node.

// serveDaemonSet runs `podtool serve` on every node: HTTP on :80 answering
// "<pod name> <greeting>", a TCP echo on :7.
func serveDaemonSet(greeting string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "serve"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "serve"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "serve", Image: PodToolImage, ImagePullPolicy: corev1.PullNever,
					Args: []string{"serve", "-http", ":80", "-echo", ":7", "-greeting", greeting},
				}}},
			},
		},
	}
}

// testKubeletAccess runs kubectl logs, exec and port-forward and a
// pods/proxy GET (kubectl get --raw and client-go's ProxyGet) against the
// serve pod on each of nodes, then a services/proxy GET and a GET of the
// Service's ClusterIP through the egress proxy.
func testKubeletAccess(ctx context.Context, t *testing.T, tb *Testbed, nodes []*RealNode, greeting string) {
	kubectl, err := Binary("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := tb.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=serve"})
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string]string{}
	for _, p := range pods.Items {
		onNode[p.Spec.NodeName] = p.Name
	}
	run := func(args ...string) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, kubectl, append([]string{"--kubeconfig", tb.Kubeconfig, "-n", "default"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	for _, n := range nodes {
		pod := onNode[n.Name]
		if pod == "" {
			t.Fatalf("no serve pod on %s: %v", n.Name, onNode)
		}
		t.Run("logs "+n.Name, func(t *testing.T) {
			start := time.Now()
			want := "serve: " + pod + " " + greeting + ":"
			var out []byte
			var kerr error
			// The pod is Ready when its process started, maybe a moment
			// before the first line is written.
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err := waitFor(wctx, "the greeting in the log of "+pod, func() (bool, error) {
				out, kerr = run("logs", pod)
				return kerr == nil && bytes.Contains(out, []byte(want)), nil
			})
			if err != nil {
				t.Fatalf("%v: last kubectl logs: %q, %v", err, out, kerr)
			}
			t.Logf("kubectl logs %s: %q in %s", pod, firstLine(out), time.Since(start).Round(time.Millisecond))
		})
		t.Run("exec "+n.Name, func(t *testing.T) {
			start := time.Now()
			out, err := run("exec", pod, "--", "/podtool", "say", "-exit", "3", greeting, "from", n.Name)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 3 {
				t.Fatalf("kubectl exec: want exit code 3, got %v", err)
			}
			if got, want := string(out), greeting+" from "+n.Name+"\n"; got != want {
				t.Errorf("kubectl exec stdout %q, want %q", got, want)
			}
			out, err = run("exec", pod, "--", "/podtool", "say", "ok")
			if err != nil || string(out) != "ok\n" {
				t.Errorf("kubectl exec: %q, %v; want \"ok\\n\", exit 0", out, err)
			}
			t.Logf("kubectl exec %s: two commands, exit codes 3 and 0, in %s", pod, time.Since(start).Round(time.Millisecond))
		})
		t.Run("port-forward "+n.Name, func(t *testing.T) {
			start := time.Now()
			sent, got := portForwardEcho(ctx, t, kubectl, tb.Kubeconfig, pod)
			if !bytes.Equal(sent, got) {
				t.Errorf("echo through kubectl port-forward: sent %d bytes, got %d back (equal: false)", len(sent), len(got))
			}
			t.Logf("kubectl port-forward %s :7: %d bytes echoed in %s", pod, len(got), time.Since(start).Round(time.Millisecond))
		})
		t.Run("pods/proxy "+n.Name, func(t *testing.T) {
			start := time.Now()
			want := pod + " " + greeting + "\n"
			out, err := run("get", "--raw", "/api/v1/namespaces/default/pods/"+pod+":80/proxy/")
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != want {
				t.Errorf("kubectl get --raw .../pods/%s:80/proxy/: %q, want %q", pod, out, want)
			}
			out, err = tb.Client().CoreV1().Pods("default").ProxyGet("http", pod, "80", "/", nil).DoRaw(ctx)
			if err != nil {
				t.Fatalf("ProxyGet %s:80: %v", pod, err)
			}
			if string(out) != want {
				t.Errorf("ProxyGet %s:80: %q, want %q", pod, out, want)
			}
			t.Logf("pods/proxy GET %s:80 twice in %s", pod, time.Since(start).Round(time.Millisecond))
		})
	}
	t.Run("services/proxy", func(t *testing.T) {
		// The API server picks an endpoint (a pod IP) of the Service and
		// dials it as for pods/proxy.
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "serve"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "serve"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}},
			},
		}
		if _, err := tb.Client().CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var out []byte
		var err error
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		werr := waitFor(wctx, "an answer through services/proxy", func() (bool, error) {
			out, err = run("get", "--raw", "/api/v1/namespaces/default/services/serve:80/proxy/")
			return err == nil, nil // 503 until the EndpointSlice is there
		})
		if werr != nil {
			t.Fatalf("%v: %v", werr, err)
		}
		name, rest, _ := strings.Cut(string(out), " ")
		if rest != greeting+"\n" || !containsString(podNames(onNode), name) {
			t.Errorf("services/proxy answered %q, want \"<a serve pod> %s\\n\" (pods %v)", out, greeting, onNode)
		}
	})
	t.Run("ClusterIP through the egress proxy", func(t *testing.T) {
		// What the API server dials for a webhook or an APIService named
		// by a Service: its ClusterIP, through the first node's kube-proxy.
		svc, err := tb.Client().CoreV1().Services("default").Get(ctx, "serve", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return tb.egress.dial(ctx, addr) },
		}}
		get := func() ([]byte, error) {
			resp, err := hc.Get("http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/")
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			return io.ReadAll(resp.Body)
		}
		var b []byte
		// The Service is seconds old: kube-proxy may not have its rules yet.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if werr := waitFor(wctx, "an answer from the ClusterIP", func() (bool, error) {
			b, err = get()
			return err == nil, nil
		}); werr != nil {
			t.Fatalf("%v: %v", werr, err)
		}
		name, rest, _ := strings.Cut(string(b), " ")
		if rest != greeting+"\n" || !containsString(podNames(onNode), name) {
			t.Errorf("GET %s:80 through the egress proxy: %q, want \"<a serve pod> %s\\n\"", svc.Spec.ClusterIP, b, greeting)
		}
	})
}

func podNames(onNode map[string]string) []string {
	var names []string
	for _, p := range onNode {
		names = append(names, p)
	}
	return names
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 7`)

// portForwardEcho runs `kubectl port-forward pod :7` on a free local port,
// sends 256 KiB of random bytes through it, and returns them and as many
// bytes as came back.
func portForwardEcho(ctx context.Context, t *testing.T, kubectl, kubeconfig, pod string) (sent, got []byte) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, kubectl, "--kubeconfig", kubeconfig, "-n", "default",
		"port-forward", "--address", "127.0.0.1", "pod/"+pod, ":7")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
			}
		}
		close(port)
	}()
	var p string
	select {
	case p = <-port:
	case <-cctx.Done():
	}
	if p == "" {
		t.Fatalf("kubectl port-forward printed no local port: %s", stderr.String())
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+p, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	sent = make([]byte, 256<<10)
	if _, err := rand.Read(sent); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(sent)
		errc <- err
	}()
	// Read exactly what was sent: whether a half-close travels through
	// the port-forward stream is not what this checks.
	got = make([]byte, len(sent))
	n, err := io.ReadFull(c, got)
	if werr := <-errc; werr != nil || err != nil {
		t.Fatalf("echo through port-forward: write %v, read %v (%d bytes back); kubectl: %s", werr, err, n, stderr.String())
	}
	return sent, got
}

func firstLine(b []byte) string {
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}

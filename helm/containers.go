package helm

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Node is what kubelet knows about the node when it starts a container
// and the chart's environment refers to (downward API).
type Node struct {
	Name string // spec.nodeName
	IP   string // status.hostIP
	// IP6 is the node's second address on a dual-stack node, or "":
	// status.hostIPs is IP, or IP and IP6.
	IP6 string
}

// Container is one container of the rendered DaemonSet as kubelet would
// start it on node: command, args and environment with every $(VAR)
// expanded and every ConfigMap and downward API reference resolved.
type Container struct {
	// Spec is the container as rendered (probes, mounts, security context).
	Spec corev1.Container
	// Sidecar reports a native sidecar: an init container with
	// restartPolicy Always, started before the regular containers.
	Sidecar bool
	// Command is the container's command followed by its args, expanded.
	Command []string
	// Env is the environment, as KEY=VALUE, in kubelet's order: envFrom,
	// then env.
	Env []string
}

// NodeContainers renders the chart with values and returns the pod's
// containers in the order kubelet starts them: native sidecars (the
// backend, by default) first, then the regular containers.
func NodeContainers(values map[string]any, opts Options, node Node) ([]Container, error) {
	r, err := Render(values, opts)
	if err != nil {
		return nil, err
	}
	objs, err := r.Objects()
	if err != nil {
		return nil, err
	}
	ds, err := DaemonSet(objs)
	if err != nil {
		return nil, err
	}
	cms := ConfigMaps(objs)
	var out []Container
	for _, c := range ds.Spec.Template.Spec.InitContainers {
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		if !sidecar {
			return nil, fmt.Errorf("init container %s is not a sidecar; the chart has none other", c.Name)
		}
		ec, err := expandContainer(c, cms, node)
		if err != nil {
			return nil, err
		}
		ec.Sidecar = true
		out = append(out, ec)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		ec, err := expandContainer(c, cms, node)
		if err != nil {
			return nil, err
		}
		out = append(out, ec)
	}
	return out, nil
}

func expandContainer(c corev1.Container, cms map[string]*corev1.ConfigMap, node Node) (Container, error) {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			return Container{}, fmt.Errorf("%s: envFrom other than a ConfigMap", c.Name)
		}
		cm, ok := cms[from.ConfigMapRef.Name]
		if !ok {
			return Container{}, fmt.Errorf("%s: ConfigMap %s is not rendered", c.Name, from.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		v, err := envValue(c, e, node, env)
		if err != nil {
			return Container{}, err
		}
		set(e.Name, v)
	}
	ec := Container{Spec: c}
	for _, s := range append(append([]string{}, c.Command...), c.Args...) {
		ec.Command = append(ec.Command, expand(s, env))
	}
	for _, k := range order {
		ec.Env = append(ec.Env, k+"="+env[k])
	}
	return ec, nil
}

func envValue(c corev1.Container, e corev1.EnvVar, node Node, env map[string]string) (string, error) {
	if e.ValueFrom == nil {
		// kubelet expands references to variables defined before this one.
		return expand(e.Value, env), nil
	}
	switch {
	case e.ValueFrom.FieldRef != nil:
		switch e.ValueFrom.FieldRef.FieldPath {
		case "spec.nodeName":
			return node.Name, nil
		case "status.hostIP", "status.podIP":
			return node.IP, nil // hostNetwork: the pod IP is the node IP
		case "status.hostIPs", "status.podIPs":
			if node.IP6 != "" {
				return node.IP + "," + node.IP6, nil
			}
			return node.IP, nil
		}
		return "", fmt.Errorf("%s: env %s: field %s not emulated", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
	case e.ValueFrom.ResourceFieldRef != nil:
		ref := e.ValueFrom.ResourceFieldRef
		if ref.Resource != "limits.memory" {
			return "", fmt.Errorf("%s: env %s: resource %s not emulated", c.Name, e.Name, ref.Resource)
		}
		q, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok {
			return "", fmt.Errorf("%s: env %s: no memory limit (kubelet would give the node's allocatable memory)", c.Name, e.Name)
		}
		divisor := int64(1)
		if !ref.Divisor.IsZero() {
			divisor = ref.Divisor.Value()
		}
		// kubelet rounds up.
		return strconv.FormatInt((q.Value()+divisor-1)/divisor, 10), nil
	}
	return "", fmt.Errorf("%s: env %s: source not emulated", c.Name, e.Name)
}

// expand replaces $(NAME) with env[NAME] as kubelet does: $$ is a literal
// $, and a reference to an undefined variable is left as written.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := env[name]; ok {
					b.WriteString(v)
				} else {
					b.WriteString(s[i : i+3+end])
				}
				i += 2 + end
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

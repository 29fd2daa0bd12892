package helm

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// chartFiles is the chart directory. "all:" keeps _helpers.tpl and
// .helmignore, which embed skips by default.
//
//go:embed all:nodedns
var chartFiles embed.FS

// chartRoot is the chart's directory inside chartFiles.
const chartRoot = "nodedns"

// Defaults of Options.
const (
	DefaultRelease   = "nodedns"
	DefaultNamespace = "kube-system"
	// DefaultKubeVersion is the cluster version renderings assume: the
	// testbed's kube-apiserver. (The SDK's own default is v1.20, older than
	// anything nodedns supports.)
	DefaultKubeVersion = "v1.36.0"
)

// Options selects the release a rendering is for. The zero value renders
// release DefaultRelease in DefaultNamespace.
type Options struct {
	Release   string
	Namespace string
	// KubeVersion is the cluster's version as Helm would report it
	// (".Capabilities.KubeVersion"), e.g. "v1.28.0". Default
	// DefaultKubeVersion.
	KubeVersion string
	// Cluster, when set, is the API server the templates' lookup calls
	// read, as `helm install` has it; nil renders as `helm template` does,
	// where lookup finds nothing and the chart refuses values that are
	// unsafe without a cluster (WithoutCluster gives the safe ones).
	Cluster *rest.Config
	// lookup, when set and Cluster is nil, answers the templates' lookup
	// calls: the unit tests' cluster that has nothing in it yet.
	lookup engine.ClientProvider
}

func (o Options) withDefaults() Options {
	if o.Release == "" {
		o.Release = DefaultRelease
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.KubeVersion == "" {
		o.KubeVersion = DefaultKubeVersion
	}
	return o
}

// Load returns the chart as the Helm SDK sees it.
func Load() (*chart.Chart, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(chartFiles, chartRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := chartFiles.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: strings.TrimPrefix(p, chartRoot+"/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read embedded chart: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	return c, nil
}

// ParseValues parses a values file (YAML) into the map Render takes.
func ParseValues(data string) (map[string]any, error) {
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(data), &v); err != nil {
		return nil, fmt.Errorf("parse values: %w", err)
	}
	return v, nil
}

// DefaultClusterIP is the DNS ClusterIP WithoutCluster sets when values
// give none: kubeadm's, the testbed's.
const DefaultClusterIP = "10.96.0.10"

// WithoutCluster returns a copy of values with the values a rendering
// without a cluster (`helm template`, Argo CD) must set, as docs/gitops.md
// lists them: service.create false, coreDNS.deployment "" (no handoff
// hooks) and service.clusterIP, DefaultClusterIP unless values set it.
// For renderings that are without a cluster on purpose: pod.yaml, and the
// tests and generators that need the pod's containers and ConfigMaps.
func WithoutCluster(values map[string]any) map[string]any {
	out := copyValues(values)
	svc, _ := out["service"].(map[string]any)
	if svc == nil {
		svc = map[string]any{}
	}
	svc["create"] = false
	if ip, _ := svc["clusterIP"].(string); ip == "" {
		svc["clusterIP"] = DefaultClusterIP
	}
	out["service"] = svc
	dns, _ := out["coreDNS"].(map[string]any)
	if dns == nil {
		dns = map[string]any{}
	}
	dns["deployment"] = ""
	out["coreDNS"] = dns
	return out
}

// copyValues copies the maps of values (other values are shared).
func copyValues(values map[string]any) map[string]any {
	out := make(map[string]any, len(values))
	for k, v := range values {
		if m, ok := v.(map[string]any); ok {
			v = copyValues(m)
		}
		out[k] = v
	}
	return out
}

// Rendering is the output of one chart rendering.
type Rendering struct {
	// Manifests are the rendered objects in Helm's install order, each
	// with the template it came from.
	Manifests []releaseutil.Manifest
	// Hooks are the rendered Helm hooks (the CoreDNS handoff Jobs), in
	// Helm's order, each with its template; they are not part of Manifests.
	Hooks []releaseutil.Manifest
	// Notes is the rendered NOTES.txt.
	Notes string
}

// Render renders the chart with values over its defaults, as `helm
// template` and `helm install` do, with the SDK's default capabilities.
func Render(values map[string]any, opts Options) (*Rendering, error) {
	opts = opts.withDefaults()
	c, err := Load()
	if err != nil {
		return nil, err
	}
	if values == nil {
		values = map[string]any{}
	}
	kv, err := chartutil.ParseKubeVersion(opts.KubeVersion)
	if err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{
		Name:      opts.Release,
		Namespace: opts.Namespace,
		Revision:  1,
		IsInstall: true,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	var out map[string]string
	switch {
	case opts.Cluster != nil:
		out, err = engine.RenderWithClient(c, vals, opts.Cluster)
	case opts.lookup != nil:
		out, err = engine.RenderWithClientProvider(c, vals, opts.lookup)
	default:
		out, err = engine.Render(c, vals)
	}
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	r := &Rendering{}
	files := map[string]string{}
	for name, content := range out {
		if path.Base(name) == "NOTES.txt" {
			r.Notes = content
			continue
		}
		files[name] = content
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("sort manifests: %w", err)
	}
	for _, h := range hooks {
		r.Hooks = append(r.Hooks, releaseutil.Manifest{Name: h.Path, Content: h.Manifest})
	}
	r.Manifests = manifests
	return r, nil
}

// YAML returns the manifests as one multi-document file, as `helm
// template` prints it.
func (r *Rendering) YAML() string {
	var b strings.Builder
	for _, m := range r.Manifests {
		fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.Name, strings.TrimSpace(m.Content))
	}
	return b.String()
}

// Templates lists the chart's template files, sorted.
func Templates() ([]string, error) {
	entries, err := fs.ReadDir(chartFiles, chartRoot+"/templates")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, nil
}

package release

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/nodedns/nodedns/helm"
	"github.com/nodedns/nodedns/images"
)

// ChartName is the chart's name, the last element of its OCI reference.
const ChartName = "nodedns"

// imageValues are the values.yaml keys PackageChart sets, by image.
var imageValues = map[string][]string{
	images.FrontendName: {"image", "frontend", "repository"},
	images.BackendName:  {"image", "backend", "repository"},
}

// PackageChart returns the chart as a .tgz for a release: version and
// appVersion set to version, image.tag left empty (so the tag is the
// appVersion) and the image repositories pointing at <registry>/<image>.
// values.yaml is edited in place, so its comments stay.
func PackageChart(registry, version string) ([]byte, *chart.Chart, error) {
	c, err := helm.Load()
	if err != nil {
		return nil, nil, err
	}
	c.Metadata.Version, c.Metadata.AppVersion = version, version
	// Artifact Hub lists the images the chart deploys by default: the
	// released ones.
	if c.Metadata.Annotations == nil {
		c.Metadata.Annotations = map[string]string{}
	}
	var listed strings.Builder
	for _, name := range []string{images.FrontendName, images.BackendName} {
		fmt.Fprintf(&listed, "- name: %s\n  image: %s/%s:%s\n", name, registry, name, version)
	}
	c.Metadata.Annotations["artifacthub.io/images"] = listed.String()
	if err := c.Validate(); err != nil {
		return nil, nil, fmt.Errorf("chart version %q: %w", version, err)
	}
	var raw []byte
	for _, f := range c.Raw {
		if f.Name == chartutil.ValuesfileName {
			if f.Data, err = setImageValues(f.Data, registry); err != nil {
				return nil, nil, err
			}
			raw = f.Data
		}
	}
	if raw == nil {
		return nil, nil, fmt.Errorf("chart has no %s", chartutil.ValuesfileName)
	}
	if c.Values, err = chartutil.ReadValues(raw); err != nil {
		return nil, nil, fmt.Errorf("edited %s: %w", chartutil.ValuesfileName, err)
	}
	dir, err := os.MkdirTemp("", "nodedns-chart-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	p, err := chartutil.Save(c, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("package chart: %w", err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, nil, fmt.Errorf("package chart: %w", err)
	}
	if filepath.Base(p) != ChartName+"-"+version+".tgz" {
		return nil, nil, fmt.Errorf("package chart: wrote %s", filepath.Base(p))
	}
	return data, c, nil
}

// setImageValues sets image.tag to "" and each image's repository to
// <registry>/<image> in a values.yaml. Only those scalars' text changes:
// comments and blank lines stay as written (a YAML re-encoding would drop
// the blank lines), and the result is parsed again to check it.
func setImageValues(values []byte, registry string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	lines := strings.Split(string(values), "\n")
	want := map[string]string{"image.tag": ""}
	set := func(path []string, v string) error {
		n := &doc
		if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
			n = n.Content[0]
		}
		for _, k := range path {
			var next *yaml.Node
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						next = n.Content[i+1]
					}
				}
			}
			if next == nil {
				return fmt.Errorf("values.yaml has no %s", strings.Join(path, "."))
			}
			n = next
		}
		if n.Kind != yaml.ScalarNode || n.Line < 1 || n.Line > len(lines) || n.Column < 1 {
			return fmt.Errorf("values.yaml: %s is not a scalar", strings.Join(path, "."))
		}
		line := lines[n.Line-1]
		start := n.Column - 1
		end, err := scalarEnd(line, start)
		if err != nil {
			return fmt.Errorf("values.yaml line %d (%s): %w", n.Line, strings.Join(path, "."), err)
		}
		lines[n.Line-1] = line[:start] + strconv.Quote(v) + line[end:]
		want[strings.Join(path, ".")] = v
		return nil
	}
	for _, name := range []string{images.FrontendName, images.BackendName} {
		if err := set(imageValues[name], registry+"/"+name); err != nil {
			return nil, err
		}
	}
	if err := set([]string{"image", "tag"}, ""); err != nil {
		return nil, err
	}
	out := []byte(strings.Join(lines, "\n"))
	vals, err := chartutil.ReadValues(out)
	if err != nil {
		return nil, fmt.Errorf("edited values.yaml: %w", err)
	}
	for k, v := range want {
		if got, err := vals.PathValue(k); err != nil || got != v {
			return nil, fmt.Errorf("edited values.yaml: %s = %v (%v), want %q", k, got, err, v)
		}
	}
	return out, nil
}

// scalarEnd returns where the single-line scalar starting at line[start]
// ends: after its closing quote, or before a comment or the line's end.
func scalarEnd(line string, start int) (int, error) {
	if start >= len(line) {
		return 0, fmt.Errorf("no scalar at column %d", start+1)
	}
	switch q := line[start]; q {
	case '"', '\'':
		for i := start + 1; i < len(line); i++ {
			if line[i] == '\\' && q == '"' {
				i++
				continue
			}
			if line[i] == q {
				if q == '\'' && i+1 < len(line) && line[i+1] == '\'' {
					i++
					continue
				}
				return i + 1, nil
			}
		}
		return 0, fmt.Errorf("unterminated quoted scalar")
	case '|', '>', '&', '*', '!':
		return 0, fmt.Errorf("want a plain or quoted scalar")
	}
	end := len(line)
	if i := strings.Index(line[start:], " #"); i >= 0 {
		end = start + i
	}
	return start + len(strings.TrimRight(line[start:end], " \t")), nil
}

package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodedns/nodedns/shared/proctest"
)

// prometheusAddr is where the Prometheus server listens inside the node
// namespace.
const prometheusAddr = "127.0.0.1:9090"

// prometheusUnavailable says why the Prometheus server and promtool cannot
// run here, or "".
func prometheusUnavailable() string {
	for _, tool := range []string{"prometheus", "promtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found: install Debian's prometheus package (tools/deps.sh does, as root)"
		}
	}
	return ""
}

// prometheus is a Prometheus server run by a test.
type prometheus struct {
	netns string
	proc  *proctest.Process
}

// startPrometheus runs Prometheus inside netns with scrapeConfigs and the
// rule files, its data in a temporary directory, and waits until it is
// ready.
func startPrometheus(t *testing.T, netns string, scrapeConfigs []map[string]any, ruleFiles ...string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": "2s", "evaluation_interval": "2s"},
		"scrape_configs": scrapeConfigs,
	}
	if len(ruleFiles) > 0 {
		cfg["rule_files"] = ruleFiles
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "check", "config", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, raw)
	}
	t.Logf("prometheus.yml:\n%s", raw)
	cmd := exec.Command("ip", "netns", "exec", netns, "prometheus",
		"--config.file="+file,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+prometheusAddr,
		"--log.level=warn")
	p := &prometheus{netns: netns, proc: proctest.Start(t, "prometheus", cmd)}
	waitFor(t, time.Minute, "prometheus /-/ready", p.proc, func() error {
		code, body, err := get(context.Background(), netns, "http://"+prometheusAddr+"/-/ready")
		if err == nil && code != 200 {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err
	})
	return p
}

// apiResponse is the envelope of Prometheus's HTTP API.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

// api GETs path?params from the HTTP API and decodes data into v.
func (p *prometheus) api(ctx context.Context, path string, params url.Values, v any) error {
	u := "http://" + prometheusAddr + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	code, body, err := get(ctx, p.netns, u)
	if err != nil {
		return err
	}
	var r apiResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return fmt.Errorf("GET %s: %d %q: %w", path, code, body, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, r.ErrorType, r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

// sample is one series of an instant vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates expr now and returns the instant vector.
func (p *prometheus) query(ctx context.Context, expr string) ([]sample, error) {
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	if err := p.api(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("%s: result type %s, want vector", expr, data.ResultType)
	}
	return data.Result, nil
}

// target is one active target of /api/v1/targets.
type target struct {
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Labels     map[string]string `json:"labels"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
}

func (p *prometheus) targets(ctx context.Context) ([]target, error) {
	var data struct {
		ActiveTargets []target `json:"activeTargets"`
	}
	err := p.api(ctx, "/api/v1/targets", nil, &data)
	return data.ActiveTargets, err
}

// rule is one rule of /api/v1/rules.
type rule struct {
	Name      string `json:"name"`
	Query     string `json:"query"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	State     string `json:"state"`
}

func (p *prometheus) rules(ctx context.Context) ([]rule, error) {
	var data struct {
		Groups []struct {
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	err := p.api(ctx, "/api/v1/rules", nil, &data)
	var out []rule
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	return out, err
}
